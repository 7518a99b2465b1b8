#!/bin/bash
# case: --gpus=16 without --nodes on 8-GPU nodes needs at least two nodes, and Slurm may split them unevenly
# site: dgx-h100
# args: --gpus=16
# expect: reject
# rule: gpus-per-node-unknown
# message: --gpus=16 over 2 nodes does not fix the GPUs per node
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 8
