#!/bin/bash
# case: NeMo launcher-style generated script: a yaml config heredoc carries tensor_model_parallel_size: 8 and pipeline 2
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=8 --gpus-per-node=8 --mem=0 --dependency=singleton
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --mem=0
#SBATCH --dependency=singleton
#SBATCH --job-name=nemo-gpt3_40b
#SBATCH --time=1-00:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
RESULTS=/scratch/results/gpt3_40b
mkdir -p "$RESULTS"

cat > "$RESULTS/gpt3_40b_hydra.yaml" <<'YAML'
trainer:
  devices: 8
  num_nodes: 2
  precision: bf16
  max_steps: 75000
  log_every_n_steps: 10
model:
  micro_batch_size: 1
  global_batch_size: 1536
  tensor_model_parallel_size: 8
  pipeline_model_parallel_size: 2
  virtual_pipeline_model_parallel_size: null
  encoder_seq_length: 2048
  num_layers: 48
  hidden_size: 8192
  num_attention_heads: 64
  sequence_parallel: true
  optim:
    name: distributed_fused_adam
    lr: 0.9e-4
YAML

srun --output "$RESULTS/log-%j.out" --container-image=nvcr.io/nvidia/nemo:24.07 \
    --container-mounts="$RESULTS:$RESULTS" \
    python3 -u /opt/NeMo/examples/nlp/language_modeling/megatron_gpt_pretraining.py \
    --config-path="$RESULTS" --config-name=gpt3_40b_hydra.yaml
