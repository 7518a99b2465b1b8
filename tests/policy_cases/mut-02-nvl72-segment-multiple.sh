#!/bin/bash
# case: TP=12 on 4-GPU trays spans 3 trays: --segment=4 is larger than a group but no multiple of it, so groups would cross segments (racks)
# site: lab
# expect: reject
# message: --segment=4 does not keep each TP group inside one domain
# message: add --segment=3 (each segment of 3 nodes
# rule: tp-needs-segment
#SBATCH -p nvl72 -N12 --gpus-per-node=4 --segment=4
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 12
