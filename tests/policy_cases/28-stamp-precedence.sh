#!/bin/bash
# slurmgpu: site=dgx-h100 tp=8 pp=2 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8
# case: visible launcher flags beat the stamp line (issue 16 class 1): TP=16 on 2x8 is judged, the stamp only warned about
# site: dgx-h100
# expect: reject
# message: TP=16
# rule: tp-exceeds-domain
# warning: stamp says TP=8
# source: flags
# layout: tp=16 pp=1
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 16
