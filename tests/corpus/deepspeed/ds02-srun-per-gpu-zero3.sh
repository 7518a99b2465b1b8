#!/bin/bash
# case: DeepSpeed ZeRO-3 without its launcher: srun one task per GPU with env:// init, 4 nodes
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=8 --gpus-per-task=1 --cpus-per-task=8
#SBATCH -N 4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --time=12:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=12802

srun --cpu-bind=cores python -u train_zero3.py \
    --deepspeed_config configs/zero3_offload.json \
    --local_rank_from_env \
    --model bigscience/bloom-7b1 \
    --seq_len 2048 --num_epochs 1
