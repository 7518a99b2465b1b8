#!/bin/bash
# case: issue 16 class 8: TP=32 on 2x8 names no node past the job and no fix needing more than its 16 GPUs
# site: dgx-h100
# expect: reject
# message: needs 32 ranks, more than the 16 of this 2-node job
# message: use TP=8 and PP=2 (TP x PP = 16, all the job's ranks), i.e. --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 32
