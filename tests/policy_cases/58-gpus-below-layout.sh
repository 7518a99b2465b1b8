#!/bin/bash
# slurmgpu: site=dgx-h100 tp=4 pp=4 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8
# case: the layout was planned for 8 GPUs per node but the job asks for 4
# site: dgx-h100
# expect: accept
# warning: needs 8 GPUs per node
# rule: gpus-below-layout
#SBATCH -N4 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py
