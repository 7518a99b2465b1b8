#!/bin/bash
# case: Megatron-DeepSpeed fine-tune on one node, TP=1 with ZeRO-3 and --no-pipeline-parallel
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8 -c 64
#SBATCH -N1
#SBATCH --gpus-per-node=8
#SBATCH -c 64
#SBATCH -t 3:00:00

cat > ds_zero3.json <<'JSON'
{
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 8,
  "zero_optimization": {
    "stage": 3,
    "overlap_comm": true,
    "contiguous_gradients": true,
    "stage3_max_live_parameters": 3e9,
    "stage3_prefetch_bucket_size": 5e8
  },
  "bf16": {"enabled": true}
}
JSON

deepspeed --num_gpus 8 finetune_llama.py \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 \
    --no-pipeline-parallel \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --seq-length 4096 --max-position-embeddings 4096 \
    --micro-batch-size 4 --global-batch-size 256 \
    --bf16 --deepspeed --deepspeed_config ds_zero3.json --zero-stage 3 \
    --load /models/llama2-7b-mds --data-path /data/sft/sft_text_document
