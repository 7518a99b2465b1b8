#!/bin/bash
# case: torchtitan CLI overrides --parallelism.tensor_parallel_degree 4 --parallelism.pipeline_parallel_degree 2 on 4 nodes
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH -N 4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH -t 12:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export LOGLEVEL=INFO
export PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"

nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )
head_node=${nodes[0]}

CONFIG_FILE=${CONFIG_FILE:-"./torchtitan/models/llama3/train_configs/llama3_70b.toml"}

srun torchrun --nnodes "$SLURM_NNODES" --nproc_per_node 8 \
    --rdzv_id "$RANDOM" --rdzv_backend c10d --rdzv_endpoint "$head_node:29500" \
    -m torchtitan.train --job.config_file "$CONFIG_FILE" \
    --parallelism.tensor_parallel_degree 4 \
    --parallelism.pipeline_parallel_degree 2 \
    --parallelism.data_parallel_shard_degree -1 \
    --training.steps 3000 --metrics.log_freq 10
