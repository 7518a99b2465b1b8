#!/bin/bash
# case: the value on the next line after a backslash continuation
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py \
    --num-layers 80 \
    --tensor-model-parallel-size \
        16 \
    --pipeline-model-parallel-size 1
