#!/bin/bash
# case: true positive: a wrapper called with an environment prefix TP=16 on a 2x8 job
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH -N2
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH -t 03:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
TP=16 PP=1 srun ./megatron_wrapper.sh --model llama-70b
