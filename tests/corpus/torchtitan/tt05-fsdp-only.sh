#!/bin/bash
# case: torchtitan FSDP only across 4 nodes (tensor_parallel_degree=1 in the toml, no CLI override)
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=1 --gpus-per-node=8 --exclusive
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=04:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

cat > fsdp.toml <<'TOML'
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 4096
steps = 500
[parallelism]
data_parallel_shard_degree = 32
tensor_parallel_degree = 1
[checkpoint]
enable = true
folder = "checkpoint"
interval = 100
TOML

MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nnodes "$SLURM_JOB_NUM_NODES" --nproc_per_node 8 --rdzv_backend c10d \
    --rdzv_endpoint "$MASTER:29500" -m torchtitan.train --job.config_file fsdp.toml
