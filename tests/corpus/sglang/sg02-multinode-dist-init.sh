#!/bin/bash
# case: SGLang over 2 nodes with --dist-init-addr, --nnodes and --node-rank; --tp 8 --dp 2 (one TP group per node)
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=06:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
HEAD_IP=$(getent hosts "$HEAD" | awk '{print $1}')

srun --ntasks-per-node=1 bash -c "python3 -m sglang.launch_server \
    --model-path Qwen/Qwen2.5-72B-Instruct --tp 8 --dp 2 --enable-dp-attention \
    --dist-init-addr $HEAD_IP:5000 --nnodes 2 --node-rank \$SLURM_NODEID \
    --trust-remote-code --host 0.0.0.0 --port 30000"
