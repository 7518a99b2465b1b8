#!/bin/bash
# case: TP=128 is larger than a 72-GPU domain whatever the segment
# site: lab
# expect: reject
# message: TP=128
# message: larger than the NVLink domain
# rule: tp-exceeds-domain
#SBATCH -p nvl72 -N32 --gpus-per-node=4 --segment=16
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 128
