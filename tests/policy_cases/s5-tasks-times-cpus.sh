#!/bin/bash
# case: -n 2 -c 200 needs 400 CPUs, more than one node has: Slurm must use two nodes
# site: dgx-h100
# expect: reject
# message: TP=16
# rule: tp-exceeds-domain
#SBATCH -n 2 -c 200 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 16
