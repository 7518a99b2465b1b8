#!/bin/bash
# case: TP=8 with 4 ranks per node on 8-GPU nodes spans nodes too
# site: dgx-h100
# expect: reject
# message: TP=8
# message: 4 ranks per node
# message: use TP=4 and PP=2
# rule: tp-spans-nodes
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 8
