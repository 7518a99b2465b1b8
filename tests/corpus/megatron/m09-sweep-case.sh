#!/bin/bash
# case: array job sweeping TP within a node by a case statement on SLURM_ARRAY_TASK_ID (TP 1/2/4/8, one node)
# site: dgx-h100
# expect: accept
# shape: --array=0-3 -N1 --gpus-per-node=8
#SBATCH --array=0-3
#SBATCH -N 1
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH -o sweep-%A_%a.out
#SBATCH -t 01:00:00

case "$SLURM_ARRAY_TASK_ID" in
    0) TP=1 ;;
    1) TP=2 ;;
    2) TP=4 ;;
    3) TP=8 ;;
esac

echo "array task $SLURM_ARRAY_TASK_ID: TP=$TP"
torchrun --standalone --nproc-per-node=8 pretrain_gpt.py \
    --tensor-model-parallel-size $TP --pipeline-model-parallel-size 1 \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size 2 --global-batch-size 64 --train-iters 200 --bf16 \
    --mock-data --tokenizer-type NullTokenizer --vocab-size 50304 \
    --log-throughput --log-interval 10
