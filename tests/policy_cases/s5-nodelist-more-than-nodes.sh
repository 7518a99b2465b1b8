#!/bin/bash
# case: -N1 with -w listing two hosts: slurmctld raises the node count to the host count
# site: dgx-h100
# args: -w gpu01,gpu03
# expect: reject
# message: TP=16
# message: 2-node job
#SBATCH -N1 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
