#!/bin/bash
# case: layout sized from SLURM_NNODES: PP = nodes, TP = 8 stays on a node (4 nodes)
# site: dgx-h100
# expect: accept
# shape: -N4 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH -N 4
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH --time=08:00:00
#SBATCH --mem=0

set -x
export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

NNODES=${SLURM_NNODES:-1}
GPUS_PER_NODE=8
TP_SIZE=8
PP_SIZE=$NNODES
NUM_LAYERS=$((PP_SIZE * 12))
head_node=$(scontrol show hostnames "$SLURM_NODELIST" | head -1)

DISTRIBUTED_ARGS="--nnodes $NNODES --nproc_per_node $GPUS_PER_NODE --rdzv_backend c10d --rdzv_endpoint ${head_node}:29400 --rdzv_id $SLURM_JOB_ID"

srun torchrun $DISTRIBUTED_ARGS pretrain_gpt.py \
    --tensor-model-parallel-size $TP_SIZE \
    --pipeline-model-parallel-size $PP_SIZE \
    --num-layers $NUM_LAYERS \
    --hidden-size 6144 --num-attention-heads 48 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size 1 --global-batch-size 1536 \
    --train-iters 20000 --lr 1.0e-4 --bf16 \
    --mock-data --tokenizer-type NullTokenizer --vocab-size 50304
