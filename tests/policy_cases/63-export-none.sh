#!/bin/bash
# case: --export=NONE still sends variables named SLURM*, so SLURMGPU_TP reaches the controller
# site: dgx-h100
# env: SLURMGPU_TP=16
# args: --export=NONE
# expect: reject
# source: env
# message: from SLURMGPU_TP
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py
