#!/bin/bash
# case: srun -m cyclic puts rank r on node r mod 2: every TP=8 group of 8 ranks spans both nodes
# site: dgx-h100
# expect: reject
# rule: tp-spans-nodes
# message: TP=8
# message: cyclic
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun -m cyclic python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
