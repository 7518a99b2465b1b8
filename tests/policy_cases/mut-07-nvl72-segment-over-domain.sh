#!/bin/bash
# case: --segment=20 holds whole TP=8 groups but is larger than one 18-node NVLink domain: a segment cannot stay in one rack
# site: lab
# expect: reject
# rule: tp-needs-segment
# message: --segment=20 does not keep each TP group inside one domain
#SBATCH -p nvl72 -N40 --gpus-per-node=4 --segment=20
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 8
