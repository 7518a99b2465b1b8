#!/bin/bash
# case: python -m torch.distributed.run with node_rank from SLURM_NODEID and a custom TP group of 4 in the training script's flags
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=03:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_PORT=$((10000 + SLURM_JOB_ID % 20000))

srun bash -c 'python -m torch.distributed.run --nnodes=$SLURM_NNODES --nproc_per_node=8 \
    --node_rank=$SLURM_NODEID --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT \
    train_tp.py --tp 4 --dp 4 --model llama-7b --steps 2000'
