#!/bin/bash
# case: #SBATCH --segment=4 keeps each TP=16 group inside one rack
# site: lab
# expect: accept
# no-warnings
# layout: tp=16
#SBATCH -p nvl72 -N8 --gpus-per-node=4
#SBATCH --segment=4
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 16 --pipeline-model-parallel-size 2
