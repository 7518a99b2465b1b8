#!/bin/bash
# case: text after an unquoted ' #' is a comment; a '#' inside quotes is not
# site: dgx-h100
# expect: accept
# no-warnings
# layout: tp=8 pp=2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2  # was --tensor-model-parallel-size 16
