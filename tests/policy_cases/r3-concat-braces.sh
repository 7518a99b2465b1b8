#!/bin/bash
# case: bash joins 1, the empty $X and 6 into one word: TP=16
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
X=
srun python pretrain_gpt.py --tensor-model-parallel-size 1${X}6
