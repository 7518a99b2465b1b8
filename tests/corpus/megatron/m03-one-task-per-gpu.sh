#!/bin/bash
# case: Megatron launched by srun with one task per GPU (no torchrun), TP=8 PP=1 DP=2 on 2 nodes
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=2:00:00
#SBATCH --partition=gpu

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=6001
export CUDA_DEVICE_MAX_CONNECTIONS=1

srun --cpu-bind=none bash -c '
  export RANK=$SLURM_PROCID
  export LOCAL_RANK=$SLURM_LOCALID
  export WORLD_SIZE=$SLURM_NTASKS
  exec python pretrain_gpt.py \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 1 \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size 4 --global-batch-size 256 \
    --lr 3e-4 --train-iters 100000 --bf16 \
    --data-path /data/wiki/wiki_text_document \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-2-7b-hf
'
