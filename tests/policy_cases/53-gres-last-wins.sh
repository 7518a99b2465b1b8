#!/bin/bash
# case: --gpus-per-node=8 plus --gres=gpu:4 reaches Slurm as gres:gpu:8,gres:gpu:4; the last wins
# site: dgx-h100
# expect: reject
# expect-slurm: 26.05-99.99 sbatch
# message: 4 ranks per node
# rule: tp-spans-nodes
#SBATCH -N2 --gpus-per-node=8 --gres=gpu:4
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 8
