#!/bin/bash
# case: older Megatron example style: DISTRIBUTED_ARGS as one string, TP=4 PP=4 over 4 nodes
# site: dgx-h100
# expect: accept
# shape: -N4 --gres=gpu:8 --ntasks-per-node=1
#SBATCH -N 4
#SBATCH --gres=gpu:8
#SBATCH --ntasks-per-node=1
#SBATCH -t 12:00:00
#SBATCH -J megatron-13b

# Model: 13B, TP=4 keeps each tensor group on half a node.
export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5
export NCCL_SOCKET_IFNAME=bond0
export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1)
MASTER_PORT=29500
NNODES=$SLURM_NNODES
WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))

TP=4
PP=4

DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank \$SLURM_NODEID --master_addr $MASTER_ADDR --master_port $MASTER_PORT"

GPT_ARGS="--tensor-model-parallel-size $TP \
    --pipeline-model-parallel-size $PP \
    --num-layers 40 \
    --hidden-size 5120 \
    --num-attention-heads 40 \
    --micro-batch-size 1 \
    --global-batch-size 512 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --train-iters 300000 \
    --lr 0.0001 \
    --lr-decay-style cosine \
    --bf16"

DATA_ARGS="--data-path /data/c4/c4_en_text_document --tokenizer-type GPT2BPETokenizer \
    --vocab-file /data/gpt2/vocab.json --merge-file /data/gpt2/merges.txt --split 98,2,0"

OUTPUT_ARGS="--log-interval 10 --save-interval 2000 --eval-interval 1000 --eval-iters 10"

echo "world size $WORLD_SIZE, TP=$TP PP=$PP"

srun bash -c "torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $GPT_ARGS $DATA_ARGS $OUTPUT_ARGS \
    --distributed-backend nccl --save /scratch/ckpt/13b --load /scratch/ckpt/13b"
