#!/bin/bash
# case: learning-rate sweep with bash functions, a for loop and printf logs mentioning "--tensor-parallel-size 16 is not needed"
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8 --array=1-4
#SBATCH -N1
#SBATCH --gpus-per-node=8
#SBATCH --array=1-4
#SBATCH -t 04:00:00
#SBATCH -o lr-sweep-%A-%a.out

set -euo pipefail

lr_for() {
    local i=$1
    printf '%s\n' 1e-5 2e-5 5e-5 1e-4 | sed -n "${i}p"
}

run_one() {
    local lr=$1
    printf 'note: 8 GPUs of one node suffice; --tensor-parallel-size 16 is not needed for a 7B model\n'
    torchrun --standalone --nproc_per_node 8 run_classification.py \
        --model_name_or_path google-bert/bert-large-uncased --dataset_name glue --dataset_config_name mnli \
        --learning_rate "$lr" --per_device_train_batch_size 32 --num_train_epochs 3 \
        --output_dir "/scratch/$USER/sweep/lr-$lr" --bf16
}

run_one "$(lr_for "$SLURM_ARRAY_TASK_ID")"
