#!/bin/bash
# case: het job of two 1-node components; srun --het-group=0,1 runs one TP=16 step over both
# site: dgx-h100
# expect: reject
# message: TP=16
# message: het step
# rule: het-step
#SBATCH -N1 --gpus-per-node=8
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --het-group=0,1 python pretrain_gpt.py \
    --tensor-model-parallel-size 16
