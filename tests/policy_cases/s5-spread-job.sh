#!/bin/bash
# case: --spread-job puts the two tasks on two nodes: TP=16 spans them
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -n 2 --spread-job --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 16
