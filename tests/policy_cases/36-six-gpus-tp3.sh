#!/bin/bash
# case: TP=3 divides 6-GPU nodes
# site: lab
# expect: accept
# no-warnings
# layout: tp=3 pp=2
#SBATCH -p six -N2 --gpus-per-node=6
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 3 --pipeline-model-parallel-size 2
