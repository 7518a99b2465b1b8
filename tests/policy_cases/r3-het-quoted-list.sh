#!/bin/bash
# case: --het-group="0,1" (the list quoted) is the step over both components
# site: dgx-h100
# expect: reject
# rule: het-step
# message: TP=16
# message: 2 nodes
#SBATCH -N1 --gpus-per-node=8
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --het-group="0,1" python pretrain_gpt.py --tensor-model-parallel-size 16
