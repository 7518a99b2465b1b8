#!/bin/bash
# case: SLURMGPU_TP/_PP come before launcher flags
# site: dgx-h100
# env: SLURMGPU_TP=8 SLURMGPU_PP=2
# expect: accept
# warning: SLURMGPU_TP environment variable says TP=8
# source: env
# layout: tp=8 pp=2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
