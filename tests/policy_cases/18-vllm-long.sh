#!/bin/bash
# case: vLLM --tensor-parallel-size across two nodes (enforced on this site)
# site: dgx-h100
# expect: reject
# message: TP=16
# launcher: vllm
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
vllm serve m --tensor-parallel-size 16 --distributed-executor-backend ray
