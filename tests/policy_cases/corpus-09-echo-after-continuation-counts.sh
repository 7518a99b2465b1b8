#!/bin/bash
# case: a line that continues the previous one (backslash) is an argument, not an echo command: TP=16 counts
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py \
echo --tensor-model-parallel-size 16
