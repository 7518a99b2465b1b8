#!/bin/bash
# case: vLLM is warn-only on this site; a dummy vLLM flag on another line must not relax Megatron's TP=16
# site: lab
# expect: reject
# message: TP=16
# message: --tensor-model-parallel-size 16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
: --tensor-parallel-size 16;
srun python pretrain_gpt.py --tensor-model-parallel-size 16
