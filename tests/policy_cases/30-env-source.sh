#!/bin/bash
# case: SLURMGPU_TP in the job environment
# site: dgx-h100
# env: SLURMGPU_TP=16
# expect: reject
# message: from SLURMGPU_TP
# source: env
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py
