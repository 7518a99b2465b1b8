#!/bin/bash
# slurmgpu: site=perlmutter tp=4 pp=1 dp=4 cp=1 ep=1 nodes=2 gpus_per_node=4
# case: a script generated for another site
# site: dgx-h100
# expect: accept
# warning: generated for site 'perlmutter'
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py
