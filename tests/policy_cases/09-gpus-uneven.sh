#!/bin/bash
# case: --gpus=12 -N2 can land as 8+4, so a multi-node TP>1 job needs a per-node request
# site: dgx-h100
# expect: reject
# message: --gpus=12
# message: unevenly
# message: --gpus-per-node
# rule: gpus-per-node-unknown
#SBATCH --gpus=12
#SBATCH --nodes=2
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python train.py --tensor-model-parallel-size 4
