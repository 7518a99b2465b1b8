#!/bin/bash
# case: a variable declared -i evaluates its assignments as arithmetic: TP=8*2 is 16
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
declare -i TP=8*2
srun python pretrain_gpt.py --tensor-model-parallel-size $TP
