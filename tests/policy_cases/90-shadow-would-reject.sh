#!/bin/bash
# case: shadow mode: TP=16 over two 8-GPU nodes is let through without a word; the would-be verdict is reject
# site: lab-shadow
# expect: accept
# no-warnings
# would: reject
# shadow-message: TP=16
# shadow-message: use TP=8 and PP=2
# rule: tp-exceeds-domain
# layout: tp=16 pp=1
#SBATCH -p h100 -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 16
