#!/bin/bash
# case: the site chose warn-only for vLLM (which documents cross-node TP)
# site: lab
# expect: accept
# warning: warn-only for launcher vllm
# launcher: vllm
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
vllm serve m --tensor-parallel-size 16 --distributed-executor-backend ray
