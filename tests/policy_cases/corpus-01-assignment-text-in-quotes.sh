#!/bin/bash
# case: 'TP=16' inside a quoted log message is no environment prefix (the corpus's m07): TP=8 PP=2 runs
# site: dgx-h100
# expect: accept
# layout: tp=8 pp=2
# no-warnings
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
log() { printf '%s\n' "$*"; }
log "layout: TP=8 PP=2 (see header: TP=16 was slower)"
echo "TP=16 PP=1 was 40% slower"
srun torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
