#!/bin/bash
# case: GB200 NVL72: EP=64 (DeepSeek-V3 style) over 32 trays needs each expert group inside one rack
# site: lab
# expect: reject
# message: EP=64 (expert-parallel groups of 64 ranks with TP=1)
# message: add --segment=16
# rule: ep-needs-segment
# not-rule: tp-needs-segment
#SBATCH -p nvl72 -N32 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 1 --pipeline-model-parallel-size 8 \
  --expert-model-parallel-size 64
