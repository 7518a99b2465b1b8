#!/bin/bash
# case: $TP not set in the script comes from the submitting environment
# site: dgx-h100
# env: TP=16
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size $TP
