#!/bin/bash
# case: -w gpu01,gpu03 on the command line: Slurm gives the job both hosts, so TP=16 spans two nodes
# site: dgx-h100
# args: -w gpu01,gpu03
# expect: reject
# message: TP=16
# message: 2-node job
#SBATCH --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
