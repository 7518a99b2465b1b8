#!/bin/bash
# case: true positive: Llama-70B with TP=16 on two 8-GPU nodes: a tensor group spans the network
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH --time=1-00:00:00
#SBATCH --exclusive

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export CUDA_DEVICE_MAX_CONNECTIONS=1
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)

MODEL_ARGS=(
    --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672
    --num-attention-heads 64 --group-query-attention --num-query-groups 8
    --seq-length 4096 --max-position-embeddings 4096
    --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights
    --position-embedding-type rope --disable-bias-linear
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 16
    --pipeline-model-parallel-size 1
    --sequence-parallel
    --use-distributed-optimizer
)

srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node 8 \
    --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:29500" \
    pretrain_gpt.py "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" \
    --micro-batch-size 1 --global-batch-size 1024 --bf16 \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model /models/llama-2-70b \
    --data-path /data/redpajama/rp_text_document --train-iters 250000
