#!/bin/bash
# case: a shell function named echo runs its arguments: the echo line is a launch, not a message
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
echo() { "$@"; }
echo srun python pretrain_gpt.py --tensor-model-parallel-size 16
