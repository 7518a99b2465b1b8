#!/bin/bash
# case: TP=8 on a step over two 1-node components of 8 GPUs: each TP group stays on one node
# site: dgx-h100
# expect: accept
# not-rule: tp-exceeds-domain
# not-rule: tp-spans-nodes
#SBATCH -N1 --gpus-per-node=8
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --het-group=0,1 python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
