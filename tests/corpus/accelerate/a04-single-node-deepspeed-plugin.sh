#!/bin/bash
# case: accelerate on one node with --use_deepspeed --zero_stage 3 and --num_processes 8
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8 --ntasks=1 -c 64
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-node=8
#SBATCH -c 64
#SBATCH -t 08:00:00

accelerate launch --num_processes 8 --num_machines 1 --use_deepspeed --zero_stage 3 \
    --offload_optimizer_device none --mixed_precision bf16 \
    sft.py --model_name_or_path mistralai/Mistral-7B-v0.1 \
    --dataset_name HuggingFaceH4/ultrachat_200k --bf16 --gradient_checkpointing
