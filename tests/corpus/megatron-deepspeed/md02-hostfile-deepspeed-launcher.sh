#!/bin/bash
# case: Megatron-DeepSpeed via the deepspeed launcher and a hostfile built from the node list; TP=8 PP=4 on 4 nodes
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=1 --gres=gpu:8 --exclusive
#SBATCH -N 4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --exclusive
#SBATCH -t 2-00:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

HOSTFILE=hostfile.$SLURM_JOB_ID
scontrol show hostnames "$SLURM_JOB_NODELIST" | while read -r host; do
    echo "$host slots=8"
done > "$HOSTFILE"

cat > ds_config.json <<'JSON'
{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 16,
  "zero_optimization": {"stage": 1},
  "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12},
  "steps_per_print": 1
}
JSON

deepspeed --hostfile "$HOSTFILE" --master_addr "$(head -n1 "$HOSTFILE" | cut -d' ' -f1)" \
    pretrain_gpt.py \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 4 \
    --num-layers 96 --hidden-size 12288 --num-attention-heads 96 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size 1 --global-batch-size 2048 \
    --rampup-batch-size 16 16 5859375 \
    --train-samples 300000000 --lr 6e-5 --min-lr 6e-6 --lr-decay-style cosine \
    --fp16 --checkpoint-activations \
    --deepspeed --deepspeed_config ds_config.json --zero-stage 1 \
    --deepspeed-activation-checkpointing
