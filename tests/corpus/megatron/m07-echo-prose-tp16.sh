#!/bin/bash
# case: prose and log text mention TP=16 and --tensor-model-parallel-size 16; the run itself is TP=8 PP=2
# site: dgx-h100
# expect: accept
# shape: -N2 --gpus-per-node=8 --ntasks-per-node=1
#SBATCH --nodes=2
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
#SBATCH --time=06:00:00
#
# Notes from the scaling study: we first tried TP=16 across both nodes and the
# all-reduce over InfiniBand ate 40% of the step time. TP=8 with PP=2 is the one
# that fits the NVLink domain, so that is what this script runs.
# (Do not go back to --tensor-model-parallel-size 16 on this cluster.)

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export CUDA_DEVICE_MAX_CONNECTIONS=1

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

log "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"
log "layout: TP=8 PP=2 (see header: TP=16 was slower)"

MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d \
    --rdzv_endpoint "$MASTER_ADDR:29500" pretrain_gpt.py \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 \
    --num-layers 48 --hidden-size 8192 --num-attention-heads 64 \
    --seq-length 4096 --max-position-embeddings 4096 \
    --micro-batch-size 1 --global-batch-size 512 --bf16 --mock-data \
    --tokenizer-type NullTokenizer --vocab-size 128256 --train-iters 1000
log "done"
