#!/bin/bash
# case: printf -v stores the text in a variable that a launch line uses: its TP=16 counts (2x8)
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
printf -v ARGS -- '--tensor-model-parallel-size 16'
srun python pretrain_gpt.py $ARGS
