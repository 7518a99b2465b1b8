#!/bin/bash
# case: after a backslash-newline the # is inside a word (--data-path=/x#), not a comment: the flag after it runs
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --data-path=/data/x\
# --tensor-model-parallel-size 16
