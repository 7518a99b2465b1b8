#!/bin/bash
# case: --flag=N spelling
# site: dgx-h100
# expect: reject
# message: TP=16
# layout: tp=16
#SBATCH -N 2
#SBATCH --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --ntasks-per-node=8 python pretrain_gpt.py --tensor-model-parallel-size=16 --pipeline-model-parallel-size=1
