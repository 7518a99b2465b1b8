#!/bin/bash
# case: srun --mpi=pmix with Horovod-style one rank per GPU, 2 nodes, no model parallelism
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH --nodes 2
#SBATCH --ntasks-per-node 8
#SBATCH --gpus-per-node 8
#SBATCH --time 02:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export HOROVOD_GPU_OPERATIONS=NCCL
srun --mpi=pmix --gpus-per-task=1 python tensorflow2_keras_mnist.py
