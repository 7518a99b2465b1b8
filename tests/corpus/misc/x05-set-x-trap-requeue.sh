#!/bin/bash
# case: set -x, a SIGUSR1 trap that requeues, and a checkpoint-resume wrapper around Megatron TP=4 on one node
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8 --signal=B:USR1@300 --requeue
#SBATCH -N1
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH -t 04:00:00

set -x

requeue_job() {
    echo "caught SIGUSR1, requeueing $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
}
trap requeue_job USR1

CKPT=/scratch/ckpt/run42
LOAD_ARGS=()
if [[ -f "$CKPT/latest_checkpointed_iteration.txt" ]]; then
    LOAD_ARGS=(--load "$CKPT")
fi

torchrun --standalone --nproc_per_node 8 pretrain_gpt.py \
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 1 \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size 2 --global-batch-size 256 --bf16 --mock-data \
    --tokenizer-type NullTokenizer --vocab-size 32000 \
    --save "$CKPT" --save-interval 500 "${LOAD_ARGS[@]}" &
wait
