#!/bin/bash
# case: --distribution=plane=4 deals ranks out in blocks of 4: a TP=8 group takes 4 ranks on each of two nodes
# site: dgx-h100
# expect: reject
# rule: tp-spans-nodes
# message: plane=4
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --distribution=plane=4 python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
