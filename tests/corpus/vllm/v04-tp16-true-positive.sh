#!/bin/bash
# case: true positive: vLLM TP = all 16 GPUs of two nodes, $((SLURM_NNODES * SLURM_GPUS_ON_NODE))
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
bash ./ray_up.sh
TOTAL_GPUS=$((SLURM_NNODES * SLURM_GPUS_ON_NODE))
python -m vllm.entrypoints.openai.api_server --model deepseek-ai/DeepSeek-V3 \
    --tensor-parallel-size $TOTAL_GPUS --trust-remote-code --distributed-executor-backend ray
