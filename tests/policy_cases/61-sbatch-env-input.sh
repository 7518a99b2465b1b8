#!/bin/bash
# case: SBATCH_GPUS_PER_NODE from the environment overrides the script's #SBATCH line
# site: dgx-h100
# env: SBATCH_GPUS_PER_NODE=4
# expect: reject
# message: 4 ranks per node
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 8
