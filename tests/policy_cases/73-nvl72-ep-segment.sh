#!/bin/bash
# case: GB200 NVL72: EP=64 with 16-node segments keeps every expert group in one rack
# site: lab
# expect: accept
# not-rule: ep-needs-segment
#SBATCH -p nvl72 -N32 --gpus-per-node=4
#SBATCH --segment=16
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 1 --pipeline-model-parallel-size 8 \
  --expert-model-parallel-size 64
