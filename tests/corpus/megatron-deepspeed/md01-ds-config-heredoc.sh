#!/bin/bash
# case: Megatron-DeepSpeed GPT with ds_config.json written by a heredoc, TP=4 PP=2 ZeRO-1, launched per node by srun
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --job-name=mds-gpt
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=12:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

TP=4
PP=2
ZERO_STAGE=1
MICRO_BATCH=2
GLOBAL_BATCH=512
DS_CONFIG=ds_config.$SLURM_JOB_ID.json

cat <<EOT > $DS_CONFIG
{
  "train_batch_size": $GLOBAL_BATCH,
  "train_micro_batch_size_per_gpu": $MICRO_BATCH,
  "steps_per_print": 10,
  "zero_optimization": {
    "stage": $ZERO_STAGE
  },
  "bf16": {
    "enabled": true
  },
  "gradient_clipping": 1.0,
  "wall_clock_breakdown": false
}
EOT

ds_args=""
ds_args=" --deepspeed ${ds_args}"
ds_args=" --deepspeed_config=$DS_CONFIG ${ds_args}"
ds_args=" --zero-stage=$ZERO_STAGE ${ds_args}"
ds_args=" --deepspeed-activation-checkpointing ${ds_args}"

MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR MASTER_PORT=29500

srun --jobid "$SLURM_JOB_ID" bash -c "python -m torch.distributed.run \
    --nproc_per_node 8 --nnodes $SLURM_NNODES --node_rank \$SLURM_PROCID \
    --master_addr $MASTER_ADDR --master_port $MASTER_PORT \
    pretrain_gpt.py \
    --tensor-model-parallel-size $TP \
    --pipeline-model-parallel-size $PP \
    --num-layers 40 --hidden-size 5120 --num-attention-heads 40 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size $MICRO_BATCH --global-batch-size $GLOBAL_BATCH \
    --train-iters 100000 --lr 1e-4 --bf16 \
    --data-path /data/oscar/oscar_text_document \
    --vocab-file /data/gpt2-vocab.json --merge-file /data/gpt2-merges.txt \
    $ds_args"
