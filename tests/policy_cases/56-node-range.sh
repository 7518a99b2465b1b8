#!/bin/bash
# case: -N 1-2 may run on two nodes
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N 1-2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
