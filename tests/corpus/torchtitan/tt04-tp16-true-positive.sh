#!/bin/bash
# case: true positive: torchtitan with --parallelism.tensor_parallel_degree 16 on two 8-GPU nodes
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=1:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint "$head:29500" \
    -m torchtitan.train --job.config_file ./train_configs/llama3_405b.toml \
    --parallelism.tensor_parallel_degree 16 --parallelism.pipeline_parallel_degree 1
