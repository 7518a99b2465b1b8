#!/bin/bash
# case: the fix the filter suggests (TP=8 PP=2) passes without a word
# site: dgx-h100
# expect: accept
# no-warnings
# source: flags
# launcher: megatron
# layout: tp=8 pp=2
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
torchrun --nnodes=2 --nproc-per-node=8 pretrain_gpt.py \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 2
