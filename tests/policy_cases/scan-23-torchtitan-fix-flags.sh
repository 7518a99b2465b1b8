#!/bin/bash
# case: issue 16 class 8: the fix for torchtitan is written in its --parallelism flags
# site: dgx-h100
# expect: reject
# launcher: torchtitan
# message: i.e. --parallelism.tensor_parallel_degree 8 --parallelism.pipeline_parallel_degree 2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nproc-per-node 8 -m torchtitan.train --parallelism.tensor_parallel_degree 16
