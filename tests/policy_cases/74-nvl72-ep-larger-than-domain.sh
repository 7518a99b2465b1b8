#!/bin/bash
# case: GB200 NVL72: EP=32 x TP=4 = 128 GPUs cannot fit one 72-GPU rack at all
# site: lab
# expect: reject
# message: EP=32 (expert-parallel groups of 128 ranks with TP=4) spans 32 nodes, more than the NVLink domain
# rule: ep-exceeds-domain
#SBATCH -p nvl72 -N32 --gpus-per-node=4
#SBATCH --segment=16
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 4 --expert-model-parallel-size 32
