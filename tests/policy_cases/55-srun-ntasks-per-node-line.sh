#!/bin/bash
# case: the launch line's srun --ntasks-per-node=4 is the rank layout
# site: dgx-h100
# expect: reject
# message: 4 ranks per node (srun --ntasks-per-node)
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --ntasks-per-node=4 python train.py --tensor-model-parallel-size 8
