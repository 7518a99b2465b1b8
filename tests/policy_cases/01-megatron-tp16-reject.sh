#!/bin/bash
# case: the example: Megatron TP=16 on two 8-GPU DGX H100 nodes spans nodes
# site: dgx-h100
# expect: reject
# message: TP=16
# message: partition 'gpu'
# message: 8 GPUs per node
# message: use TP=8 and PP=2
# rule: tp-exceeds-domain
# source: flags
# launcher: megatron
# layout: tp=16 pp=1
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
torchrun --nnodes=2 --nproc-per-node=8 pretrain_gpt.py \
    --tensor-model-parallel-size 16 \
    --pipeline-model-parallel-size 1
