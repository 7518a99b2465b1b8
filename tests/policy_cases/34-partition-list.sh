#!/bin/bash
# case: -p h100,quad: every listed partition is checked; quad's 4-GPU nodes reject TP=8
# site: lab
# args: -p h100,quad
# expect: reject
# message: partition 'quad'
# message: 4 GPUs per node
# message: across nodes 0-1
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 8
