#!/bin/bash
# case: command-line options override #SBATCH lines (-N1 makes it single-node)
# site: dgx-h100
# args: -N 1
# expect: accept
# not-rule: tp-exceeds-domain
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
