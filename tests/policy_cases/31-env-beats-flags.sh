#!/bin/bash
# case: visible launcher flags beat SLURMGPU_TP/_PP in the environment (issue 16 class 1)
# site: dgx-h100
# env: SLURMGPU_TP=8 SLURMGPU_PP=2
# expect: reject
# message: TP=16
# rule: tp-exceeds-domain
# warning: SLURMGPU_TP environment variable says TP=8
# source: flags
# layout: tp=16 pp=1
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
