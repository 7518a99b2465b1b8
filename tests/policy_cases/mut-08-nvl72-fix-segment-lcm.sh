#!/bin/bash
# case: TP=6 spans 3 trays and EP=8 (expert TP 1) 2 trays: the fix's segment holds both, a multiple of 6 trays
# site: lab
# expect: reject
# rule: tp-needs-segment
# message: add --segment=6 (each segment of 6 nodes
#SBATCH -p nvl72 -N12 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 6 --expert-model-parallel-size 8 --expert-tensor-parallel-size 1
