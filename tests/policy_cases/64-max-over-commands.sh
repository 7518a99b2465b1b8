#!/bin/bash
# case: several launches: the largest TP is the one checked
# site: dgx-h100
# expect: reject
# message: TP=16 (script line
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python eval.py --tensor-model-parallel-size 1
srun python train.py --tensor-model-parallel-size 16
srun python eval.py --tensor-model-parallel-size 2
