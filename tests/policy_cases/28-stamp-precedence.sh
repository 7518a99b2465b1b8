#!/bin/bash
# slurmgpu: site=dgx-h100 tp=8 pp=2 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8
# case: the stamp line comes first; flags that disagree get a warning
# site: dgx-h100
# expect: accept
# warning: stamp says TP=8
# source: stamp
# layout: tp=8 pp=2 dp=1
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 16
