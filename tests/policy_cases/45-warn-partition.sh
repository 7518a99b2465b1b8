#!/bin/bash
# case: a warn-only partition accepts with the would-be rejection as a warning
# site: lab
# expect: accept
# warning: TP=16
# warning: not enforced: warn-only for partition 'soft'
# rule: tp-exceeds-domain
#SBATCH -p soft -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 16
