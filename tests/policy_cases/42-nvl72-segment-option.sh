#!/bin/bash
# case: --segment given on the command line
# site: lab
# args: --segment=4
# expect: accept
# expect-slurm: 24.05-25.11.1 reject
# no-warnings
#SBATCH -p nvl72 -N4 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 16
