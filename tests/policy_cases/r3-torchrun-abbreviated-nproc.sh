#!/bin/bash
# case: torchrun's parser takes --nproc-per for --nproc-per-node: 4 ranks per node split every TP=8 group
# site: dgx-h100
# expect: reject
# rule: tp-spans-nodes
# message: 4 ranks per node
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nnodes=2 --nproc-per 4 pretrain_gpt.py --tensor-model-parallel-size 8
