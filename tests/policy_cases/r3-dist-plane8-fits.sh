#!/bin/bash
# case: plane=8 hands each node whole blocks of 8 ranks: every TP=8 group stays on one node
# site: dgx-h100
# expect: accept
# not-rule: tp-spans-nodes
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --distribution=plane=8 python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
