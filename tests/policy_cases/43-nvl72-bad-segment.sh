#!/bin/bash
# case: --segment=3 (12 GPUs) cannot hold TP=16 groups; the fix names a segment that can, never one larger than the 6-node job
# site: lab
# expect: reject
# message: --segment=3 does not keep
# message: add --segment=6 (each segment of 6 nodes
#SBATCH -p nvl72 -N6 --gpus-per-node=4 --segment=3
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 16
