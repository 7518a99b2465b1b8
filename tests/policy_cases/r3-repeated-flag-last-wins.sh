#!/bin/bash
# case: argparse keeps the last of a repeated option: this job runs TP=8, which fits
# site: dgx-h100
# expect: accept
# layout: tp=8
# not-rule: tp-exceeds-domain
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 16 --pipeline-model-parallel-size 1 \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
