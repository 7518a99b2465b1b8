#!/bin/bash
# case: true positive: NeMo Hydra override model.tensor_model_parallel_size=16 on 2x8 GPUs
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=02:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

srun python /opt/NeMo/examples/nlp/language_modeling/megatron_gpt_pretraining.py \
    trainer.num_nodes=2 trainer.devices=8 \
    model.tensor_model_parallel_size=16 \
    model.pipeline_model_parallel_size=1 \
    model.micro_batch_size=1 model.global_batch_size=64 \
    model.num_layers=80 model.hidden_size=8192 model.num_attention_heads=64
