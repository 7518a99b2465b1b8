#!/bin/bash
# case: AutoTP size in a JSON value given on the command line
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nnodes=2 --nproc-per-node=8 train.py --tensor_parallel '{"autotp_size":16}'
