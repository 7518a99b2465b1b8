#!/bin/bash
# case: het job; the step over both components runs TP=8 (one node each): fine; TP=16 is only in a comment
# site: dgx-h100
# expect: accept
# not-rule: tp-exceeds-domain
#SBATCH -N1 --gpus-per-node=8
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
# was: --tensor-model-parallel-size 16
srun --het-group=0-1 python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
