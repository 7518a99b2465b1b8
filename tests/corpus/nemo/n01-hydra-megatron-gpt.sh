#!/bin/bash
# case: NeMo 1.x megatron_gpt_pretraining.py with Hydra overrides, TP=8 PP=2, srun one task per GPU
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00
#SBATCH --exclusive
#SBATCH --job-name=nemo-gpt20b

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export CUDA_DEVICE_MAX_CONNECTIONS=1

CONTAINER=nvcr.io/nvidia/nemo:24.07
MOUNTS=/scratch:/scratch,/data:/data

read -r -d '' cmd <<EOF_CMD
cd /opt/NeMo && python examples/nlp/language_modeling/megatron_gpt_pretraining.py \
    --config-path=conf --config-name=megatron_gpt_config \
    trainer.num_nodes=${SLURM_NNODES} trainer.devices=8 \
    trainer.max_steps=100000 trainer.precision=bf16 \
    model.micro_batch_size=1 model.global_batch_size=512 \
    model.tensor_model_parallel_size=8 \
    model.pipeline_model_parallel_size=2 \
    model.num_layers=44 model.hidden_size=6144 model.num_attention_heads=48 \
    model.encoder_seq_length=2048 model.max_position_embeddings=2048 \
    model.data.data_prefix=[1.0,/data/pile/pile_text_document] \
    exp_manager.exp_dir=/scratch/results/gpt20b
EOF_CMD

srun --container-image="$CONTAINER" --container-mounts="$MOUNTS" bash -c "$cmd"
