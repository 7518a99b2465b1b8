#!/bin/bash
# case: --export=NONE hides an ordinary variable: ${TP:-8} falls back to its default
# site: dgx-h100
# env: TP=16
# args: --export=NONE
# expect: accept
# no-warnings
# layout: tp=8 pp=2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size ${TP:-8} --pipeline-model-parallel-size 2
