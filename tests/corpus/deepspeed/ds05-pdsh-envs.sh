#!/bin/bash
# case: DeepSpeed multi-node with .deepspeed_env written by a here-doc and --launcher slurm, 2 nodes, ZeRO-1
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=03:00:00
#SBATCH --output=ds-%j.log

cat > .deepspeed_env <<ENV
NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
NCCL_SOCKET_IFNAME=bond0
PYTHONPATH=$PWD
ENV
export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

scontrol show hostnames > hostfile_$SLURM_JOB_ID
deepspeed --launcher slurm --hostfile hostfile_$SLURM_JOB_ID --num_nodes 2 --num_gpus 8 \
    train.py --deepspeed --deepspeed_config ds_config_zero1.json --batch-size 32
