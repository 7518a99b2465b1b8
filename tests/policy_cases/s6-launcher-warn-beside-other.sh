#!/bin/bash
# case: vLLM's own TP=16 stays warn-only (site launchers: vllm: warn) beside a Megatron TP=8 that fits
# site: lab
# expect: accept
# warning: not enforced: warn-only for launcher vllm
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
srun python -m vllm.entrypoints.openai.api_server --tensor-parallel-size 16
