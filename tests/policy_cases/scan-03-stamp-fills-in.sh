#!/bin/bash
# slurmgpu: site=dgx-h100 tp=8 pp=2 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8
# case: issue 16 class 1: flags show TP=8 only; the stamp (same TP) fills in PP=2
# site: dgx-h100
# expect: accept
# no-warnings
# source: flags
# layout: tp=8 pp=2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 8
