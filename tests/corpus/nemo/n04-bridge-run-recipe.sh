#!/bin/bash
# case: Megatron-Bridge run_recipe.py with Hydra-style dotted overrides, TP=4 PP=2 CP=2 on 2 nodes
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH -N 2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=03:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_PORT=29500

RECIPE=llama3_8b_pretrain_config
OVERRIDES=(
    model.tensor_model_parallel_size=4
    model.pipeline_model_parallel_size=2
    model.context_parallel_size=2
    model.sequence_parallel=true
    train.train_iters=2000
    train.global_batch_size=256
    train.micro_batch_size=1
    checkpoint.save=/scratch/bridge/ckpt
    logger.log_interval=10
)

srun --container-image=nvcr.io/nvidia/nemo:25.07 --container-mounts=/scratch:/scratch \
    python /opt/Megatron-Bridge/examples/recipes/run_recipe.py \
    --recipe "$RECIPE" "${OVERRIDES[@]}"
