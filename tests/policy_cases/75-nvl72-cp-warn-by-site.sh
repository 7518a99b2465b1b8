#!/bin/bash
# case: GB200 NVL72: a CP group across racks is only a warning where the site says policy.groups.cp: warn
# site: lab
# expect: accept
# warning: CP=4 (context-parallel groups of 16 ranks with TP=4)
# warning: not enforced: warn-only for policy.groups.cp
# rule: cp-needs-segment
#SBATCH -p nvl72 -N8 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 4 --context-parallel-size 4
