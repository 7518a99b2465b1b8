#!/bin/bash
# case: --gpus=16 -N2 with TP=8 PP=2 fits
# site: dgx-h100
# args: --gpus=16 -N 2
# expect: accept
# no-warnings
# layout: tp=8 pp=2
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
