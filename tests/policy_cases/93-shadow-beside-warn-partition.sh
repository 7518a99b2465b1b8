#!/bin/bash
# case: a job that may run on a shadow partition or a warn partition gets the warn partition's warning (warn is stricter than shadow)
# site: lab-shadow
# expect: accept
# would: reject
# warning: not enforced: warn-only for partition 'soft'
# shadow-message: TP=16
# rule: tp-exceeds-domain
#SBATCH -p h100,soft -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 16
