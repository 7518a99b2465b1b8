#!/bin/bash
# case: issue 16 class 2: a\ #b is one word (the blank is escaped), so no comment starts there
# site: dgx-h100
# expect: reject
# message: TP=16
# source: flags
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py a\ #b --tensor-model-parallel-size 16
