#!/bin/bash
# case: gpu4 was added to the cluster after the filter was installed (the site knows only gpu): judged with the default partition's node type, and the user is told
# site: dgx-h100
# expect: reject
# rule: tp-spans-nodes
# message: TP=8
# message: partition 'gpu4'
# warning: not described by site
#SBATCH -p gpu4 -N2 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 8
