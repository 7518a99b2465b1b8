#!/bin/bash
# case: srun one task per GPU, the script maps SLURM_PROCID/SLURM_LOCALID to RANK/LOCAL_RANK itself (DDP)
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=8 --gpus-per-task=1 --cpus-per-task=16
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=16
#SBATCH --time=06:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=29500
export WORLD_SIZE=$SLURM_NTASKS

srun --cpu-bind=verbose,cores python -u train.py --backend nccl --batch-size 128 --epochs 40
