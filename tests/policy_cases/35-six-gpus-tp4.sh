#!/bin/bash
# case: TP=4 on 6-GPU nodes puts its second group across two nodes
# site: lab
# expect: reject
# message: TP=4
# message: 6 GPUs per node
# message: ranks 4-7
# message: use TP=2 and PP=2
# rule: tp-exceeds-domain
#SBATCH -p six -N2 --gpus-per-node=6
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 4
