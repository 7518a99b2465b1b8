#!/bin/bash
# case: the same job without --expert-tensor-parallel-size: Megatron's expert TP is then TP (2), so an EP group is 128 ranks, more than one rack
# site: lab
# expect: reject
# message: EP=64 (expert-parallel groups of 128 ranks with TP=2) spans 32 nodes
# rule: ep-exceeds-domain
#SBATCH -p nvl72 -N32 --gpus-per-node=4 --segment=16
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --expert-model-parallel-size 64
