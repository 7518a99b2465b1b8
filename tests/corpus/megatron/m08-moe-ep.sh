#!/bin/bash
# case: Mixtral-style MoE: TP=2 EP=4 PP=1 over 2 nodes, expert parallel across the nodes with --moe-* flags
# site: dgx-h100
# expect: accept
# shape: -N2 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH -N 2
#SBATCH --gpus-per-node 8
#SBATCH --ntasks-per-node 1
#SBATCH --time 10:00:00
#SBATCH --exclusive

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export CUDA_DEVICE_MAX_CONNECTIONS=1

MOE_ARGS=(
    --num-experts 8
    --expert-model-parallel-size 4
    --moe-router-topk 2
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 1e-2
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 1
    --sequence-parallel
    --use-distributed-optimizer
)
MODEL_ARGS=(
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336
    --num-attention-heads 32 --group-query-attention --num-query-groups 8
    --seq-length 4096 --max-position-embeddings 32768 --swiglu
    --normalization RMSNorm --position-embedding-type rope --disable-bias-linear
)
MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nnodes="$SLURM_NNODES" --nproc-per-node=8 --rdzv-backend=c10d \
    --rdzv-endpoint="$MASTER:29500" pretrain_gpt.py \
    "${MODEL_ARGS[@]}" "${MOE_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}" \
    --micro-batch-size 1 --global-batch-size 256 --bf16 --mock-data \
    --tokenizer-type NullTokenizer --vocab-size 32000 --train-iters 500
