#!/bin/bash
# case: a computed value cannot be read: a warning, not a rejection
# site: dgx-h100
# expect: accept
# warning: could not read the value
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size $((TP * 2))
