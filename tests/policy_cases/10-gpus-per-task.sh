#!/bin/bash
# case: --gpus-per-task x --ntasks-per-node gives 8 per node
# site: dgx-h100
# expect: reject
# message: TP=16
# message: 8 GPUs per node
# not-rule: world-mismatch
#SBATCH -N2 --ntasks-per-node=8 --gpus-per-task=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
