#!/bin/bash
# case: issue 16 class 2: $'\'' is one quote character, so the '#' after it starts a real comment
# site: dgx-h100
# expect: accept
# source: flags
# layout: tp=8
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 8 $'\'' # --tensor-model-parallel-size 16
