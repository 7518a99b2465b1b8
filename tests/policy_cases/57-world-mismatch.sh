#!/bin/bash
# slurmgpu: site=dgx-h100 tp=8 pp=2 dp=4 cp=1 ep=1 nodes=8 gpus_per_node=8
# case: TP x PP x CP x DP = 64 but only 16 GPUs are allocated
# site: dgx-h100
# expect: accept
# warning: = 64 ranks, but the job has 16 GPUs
# rule: world-mismatch
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py
