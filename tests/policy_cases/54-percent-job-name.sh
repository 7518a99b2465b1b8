#!/bin/bash
# case: a '%' in user text must not break message formatting
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -J 100%done -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16 --run-name "50%"
