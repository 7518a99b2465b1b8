#!/bin/bash
# case: issue 16 class 3: TP=16 as an environment prefix of the launch command
# site: dgx-h100
# expect: reject
# message: TP=16
# source: flags
# layout: tp=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
TP=16 srun ./train.sh
