#!/bin/bash
# case: --gpus-per-node=h100:8 (typed request)
# site: dgx-h100
# expect: reject
# message: TP=16
# rule: tp-exceeds-domain
#SBATCH -N2 --gpus-per-node=h100:8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
torchrun --nproc-per-node=8 train.py --tensor-model-parallel-size 16
