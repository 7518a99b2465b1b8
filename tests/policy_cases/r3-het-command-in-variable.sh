#!/bin/bash
# case: the srun command with its --het-group is in a variable; the TP flag is on the line that expands it
# site: dgx-h100
# expect: reject
# rule: het-step
# message: TP=16
#SBATCH -N1 --gpus-per-node=8
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
LAUNCH="srun --het-group=0,1"
$LAUNCH python pretrain_gpt.py --tensor-model-parallel-size 16
