#!/bin/bash
# case: a TP=4 job on the new partition fits the default node type: accepted, with the warning that the partition is not described
# site: dgx-h100
# expect: accept
# warning: not described by site
# not-rule: tp-spans-nodes
#SBATCH -p gpu4 -N2 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2
