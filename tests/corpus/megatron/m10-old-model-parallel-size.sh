#!/bin/bash
# case: true positive: an old (2020) Megatron script with --model-parallel-size 16 on 2x8 GPUs
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --ntasks-per-node=8 --gres=gpu:8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --time=24:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export MASTER_ADDR=$(hostname)
export MASTER_PORT=6000

srun python pretrain_gpt2.py \
       --model-parallel-size 16 \
       --num-layers 72 \
       --hidden-size 3072 \
       --num-attention-heads 32 \
       --batch-size 8 \
       --seq-length 1024 \
       --max-position-embeddings 1024 \
       --train-iters 320000 \
       --save checkpoints/gpt2_8.3b \
       --load checkpoints/gpt2_8.3b \
       --data-path data/webtext/webtext_text_document \
       --vocab-file gpt2-vocab.json \
       --merge-file gpt2-merges.txt \
       --distributed-backend nccl \
       --lr 0.00015 \
       --lr-decay-style cosine \
       --weight-decay 1e-2 \
       --clip-grad 1.0 \
       --warmup .01 \
       --checkpoint-activations \
       --fp16
