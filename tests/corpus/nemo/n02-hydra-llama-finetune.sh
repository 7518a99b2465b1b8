#!/bin/bash
# case: NeMo SFT of Llama-2-13B on one node, Hydra overrides with ++ and quoted lists; TP=4 PP=1
# site: dgx-h100
# expect: accept
# shape: -N1 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH -N 1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH -t 06:00:00

MODEL=/models/llama2-13b.nemo
TRAIN_DS="[/data/sft/train.jsonl]"
VALID_DS="[/data/sft/val.jsonl]"

srun --container-image=nvcr.io/nvidia/nemo:24.05 --container-mounts=/data:/data,/models:/models \
  python /opt/NeMo/examples/nlp/language_modeling/tuning/megatron_gpt_finetuning.py \
    trainer.precision=bf16 \
    trainer.devices=8 \
    trainer.num_nodes=1 \
    trainer.max_steps=2000 \
    trainer.val_check_interval=200 \
    model.restore_from_path=${MODEL} \
    model.tensor_model_parallel_size=4 \
    model.pipeline_model_parallel_size=1 \
    model.micro_batch_size=1 \
    model.global_batch_size=128 \
    model.data.train_ds.file_names=${TRAIN_DS} \
    model.data.validation_ds.file_names=${VALID_DS} \
    "model.data.train_ds.concat_sampling_probabilities=[1.0]" \
    ++model.peft.peft_scheme=none \
    exp_manager.create_wandb_logger=False
