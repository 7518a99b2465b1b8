#!/bin/bash
# case: torchtitan --parallelism.tensor_parallel_degree
# site: dgx-h100
# expect: reject
# message: TP=16
# launcher: torchtitan
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nproc-per-node=8 -m torchtitan.train --job.config_file llama3_70b.toml --parallelism.tensor_parallel_degree 16
