#!/bin/bash
# case: the same script without --export=NONE: TP=16 from the environment is used
# site: dgx-h100
# env: TP=16
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size ${TP:-8} --pipeline-model-parallel-size 2
