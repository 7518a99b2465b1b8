#!/bin/bash
# case: issue 16 class 3: an if without else: the value before it reaches the launch line too
# site: dgx-h100
# expect: accept
# rule: tp-branch-spans
# layout: tp=8
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
TP=8
if [ -n "$BIG" ]; then
  TP=16
fi
srun python pretrain_gpt.py --tensor-model-parallel-size $TP
