#!/bin/bash
# case: issue 16 class 8: the fix for vLLM is written in vLLM's flags
# site: dgx-h100
# expect: reject
# launcher: vllm
# message: use TP=8 and PP=2 (TP x PP stays 16), i.e. --tensor-parallel-size 8 --pipeline-parallel-size 2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun vllm serve m --tensor-parallel-size 16
