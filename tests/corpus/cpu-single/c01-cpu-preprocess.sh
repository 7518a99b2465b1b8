#!/bin/bash
# case: CPU-only tokenization job on a CPU partition-less request (no GPUs), Megatron's preprocess_data.py
# site: dgx-h100
# expect: accept
# shape: -N1 -n1 -c 64 --mem=256G (no GPUs)
#SBATCH --job-name=tokenize
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=64
#SBATCH --mem=256G
#SBATCH --time=12:00:00

python tools/preprocess_data.py \
    --input /data/raw/pile_00.jsonl \
    --output-prefix /data/tok/pile_00 \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-2-7b-hf \
    --append-eod --workers "$SLURM_CPUS_PER_TASK"
