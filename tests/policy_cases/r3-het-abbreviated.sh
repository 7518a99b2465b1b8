#!/bin/bash
# case: srun takes the unambiguous prefix --het-g for --het-group
# site: dgx-h100
# expect: reject
# rule: het-step
# message: TP=16
#SBATCH -N1 --gpus-per-node=8
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --het-g=0,1 python pretrain_gpt.py --tensor-model-parallel-size 16
