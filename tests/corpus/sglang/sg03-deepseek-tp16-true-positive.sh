#!/bin/bash
# case: true positive: DeepSeek-V3 with SGLang --tp-size 16 over two 8-GPU H100 nodes
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH -t 12:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun bash -c "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 \
    --tp-size 16 --dist-init-addr $MASTER:20000 --nnodes 2 --node-rank \$SLURM_NODEID \
    --trust-remote-code"
