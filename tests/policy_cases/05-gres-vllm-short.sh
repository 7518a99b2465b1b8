#!/bin/bash
# case: --gres=gpu:8 and vLLM's -tp short flag
# site: dgx-h100
# expect: reject
# message: TP=16
# message: -tp 16
# launcher: vllm
#SBATCH -N2
#SBATCH --gres=gpu:8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
vllm serve meta-llama/Llama-3.1-405B -tp 16
