#!/bin/bash
# case: torchrun --nproc_per_node=4 puts 4 ranks on each node: TP=8 crosses
# site: dgx-h100
# expect: reject
# message: 4 ranks per node
# message: --nproc-per-node
# rule: tp-spans-nodes
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nnodes 2 --nproc_per_node=4 train.py --tensor-model-parallel-size 8
