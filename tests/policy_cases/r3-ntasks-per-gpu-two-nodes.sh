#!/bin/bash
# case: 16 tasks at one task per GPU need 16 GPUs: two 8-GPU nodes although no -N is given
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH --gpus-per-node=8 --ntasks=16 --ntasks-per-gpu=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 16
