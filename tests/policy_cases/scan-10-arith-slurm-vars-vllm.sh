#!/bin/bash
# case: issue 16 class 3: vLLM TP sized as $((SLURM_NNODES * SLURM_GPUS_ON_NODE)) = 16 on 2x8
# site: dgx-h100
# expect: reject
# message: TP=16
# layout: tp=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun vllm serve m --tensor-parallel-size $((SLURM_NNODES * SLURM_GPUS_ON_NODE))
