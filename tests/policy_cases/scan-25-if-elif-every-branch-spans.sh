#!/bin/bash
# case: issue 16 class 3: every branch of if/elif/else sets a TP that spans nodes: rejected
# site: dgx-h100
# expect: reject
# message: TP=16
# layout: tp=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
if [ "$MODEL" = 405b ]; then
  TP=32
elif [ "$MODEL" = 70b ]; then
  TP=16
else
  TP=$((8 * 2))
fi
srun python pretrain_gpt.py --tensor-model-parallel-size $TP
