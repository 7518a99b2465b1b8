#!/bin/bash
# slurmgpu: site=dgx-h100 tp=16 pp=1 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8
# case: a stamp with TP=16 on 8-GPU nodes is rejected
# site: dgx-h100
# expect: reject
# message: TP=16 (from the slurmgpu stamp line)
# source: stamp
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py
