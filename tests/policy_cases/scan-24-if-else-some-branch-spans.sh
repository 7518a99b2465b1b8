#!/bin/bash
# case: issue 16 class 3: one branch sets TP=16, the other TP=8: a warning naming the line, the smallest is checked
# site: dgx-h100
# expect: accept
# warning: TP=16, set on script line 12 in one branch
# rule: tp-branch-spans
# layout: tp=8
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
if [ "$SLURM_NNODES" -gt 1 ]; then
  TP=16
else
  TP=8
fi
srun python pretrain_gpt.py --tensor-model-parallel-size $TP
