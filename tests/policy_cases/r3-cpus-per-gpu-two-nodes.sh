#!/bin/bash
# case: 8 GPUs at 32 CPUs each need 256 CPUs, more than one 224-CPU node has: Slurm splits the 8 GPUs over two nodes
# site: dgx-h100
# expect: reject
# rule: gpus-per-node-unknown
#SBATCH --gpus=8 --cpus-per-gpu=32
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 8
