#!/bin/bash
# case: --exclusive with no GPU request: the partition's whole nodes
# site: dgx-h100
# expect: reject
# message: TP=16
# not-rule: world-mismatch
#SBATCH -N2 --exclusive
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
