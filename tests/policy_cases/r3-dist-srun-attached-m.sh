#!/bin/bash
# case: the short option with its value attached (-mcyclic) is the same distribution
# site: dgx-h100
# expect: reject
# rule: tp-spans-nodes
# message: cyclic
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun -mcyclic:block python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
