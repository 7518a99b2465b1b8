#!/bin/bash
# case: HF Trainer run_clm.py via torchrun on one node with --fsdp "full_shard auto_wrap"
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8 --cpus-per-task=64
#SBATCH -N1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH -t 10:00:00

export HF_HOME=/scratch/$USER/hf
export TRANSFORMERS_OFFLINE=1

torchrun --nproc_per_node 8 examples/pytorch/language-modeling/run_clm.py \
    --model_name_or_path meta-llama/Llama-2-7b-hf \
    --dataset_name wikitext --dataset_config_name wikitext-2-raw-v1 \
    --per_device_train_batch_size 4 --gradient_accumulation_steps 4 \
    --fsdp "full_shard auto_wrap" --fsdp_transformer_layer_cls_to_wrap LlamaDecoderLayer \
    --bf16 --do_train --num_train_epochs 3 --output_dir /scratch/$USER/clm-out \
    --logging_steps 10 --save_strategy epoch
