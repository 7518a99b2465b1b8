#!/bin/bash
# case: issue 16 class 2: "'" 'a #' is two quoted words; the '#' is inside quotes, TP=16 is live
# site: dgx-h100
# expect: reject
# message: TP=16
# source: flags
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py "'" 'a #' --tensor-model-parallel-size 16
