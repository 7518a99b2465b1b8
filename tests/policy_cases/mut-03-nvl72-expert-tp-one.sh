#!/bin/bash
# case: DeepSeek-V3's TP2 EP64 over DP32 with expert TP 1: an EP group is 64 ranks (16 trays), inside one 16-node segment
# site: lab
# expect: accept
# not-rule: ep-exceeds-domain
# not-rule: ep-needs-segment
# layout: tp=2 pp=2 ep=64
#SBATCH -p nvl72 -N32 --gpus-per-node=4 --segment=16
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --expert-model-parallel-size 64 --expert-tensor-parallel-size 1
