#!/bin/bash
# case: parameters with ${VAR:-default} defaults and a usage function; TP=2 PP=1 on one node
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8
#SBATCH -N1
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH -t 30

usage() {
    cat <<USAGE
usage: sbatch $0 [MODEL_SIZE]
  environment: TP (tensor parallel, default 2), PP (pipeline, default 1), MBS, GBS
  example: TP=4 PP=2 sbatch $0 7b
USAGE
}

if [[ "${1:-}" == "-h" ]]; then usage; exit 0; fi

MODEL_SIZE=${1:-1.3b}
TP=${TP:-2}
PP=${PP:-1}
MBS=${MBS:-4}
GBS=${GBS:-128}

case "$MODEL_SIZE" in
    1.3b) LAYERS=24; HIDDEN=2048; HEADS=16 ;;
    2.7b) LAYERS=32; HIDDEN=2560; HEADS=32 ;;
    *) echo "unknown model size $MODEL_SIZE" >&2; exit 1 ;;
esac

torchrun --standalone --nproc_per_node 8 pretrain_gpt.py \
    --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP" \
    --num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads $HEADS \
    --micro-batch-size $MBS --global-batch-size $GBS \
    --seq-length 2048 --max-position-embeddings 2048 --train-iters 5000 \
    --lr 2e-4 --fp16 --mock-data --tokenizer-type NullTokenizer --vocab-size 32000
