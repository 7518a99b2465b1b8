#!/bin/bash
# case: -w gpu[01-02] without -N: Slurm gives the job both listed hosts, so TP=16 spans two nodes
# site: dgx-h100
# expect: reject
# message: TP=16
# message: 2-node job
# rule: tp-exceeds-domain
#SBATCH -w gpu[01-02] --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 16
