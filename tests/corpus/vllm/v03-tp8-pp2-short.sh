#!/bin/bash
# case: vllm serve with the short flags -tp 8 -pp 2 over 2 nodes (Ray started by a helper script)
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH -t 1-00:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
source ./start_ray_cluster.sh

vllm serve meta-llama/Llama-3.1-405B-Instruct-FP8 -tp 8 -pp 2 \
    --max-model-len 16384 --enable-chunked-prefill --port 8000
