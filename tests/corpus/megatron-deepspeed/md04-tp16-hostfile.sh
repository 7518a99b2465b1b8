#!/bin/bash
# case: true positive: Megatron-DeepSpeed with TP=16 over a 2-node hostfile: tensor group over InfiniBand
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=4:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

scontrol show hostnames | sed 's/$/ slots=8/' > hostfile

TP=16
PP=1

deepspeed --hostfile hostfile --launcher pdsh pretrain_gpt.py \
    --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP \
    --num-layers 80 --hidden-size 8192 --num-attention-heads 64 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size 1 --global-batch-size 256 --train-iters 10000 --bf16 \
    --deepspeed --deepspeed_config ds_config.json --zero-stage 1
