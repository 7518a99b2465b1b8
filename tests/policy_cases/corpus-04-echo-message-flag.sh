#!/bin/bash
# case: a flag quoted in an echo/printf message is text (the corpus's x07): the job runs TP=8 PP=2
# site: dgx-h100
# expect: accept
# layout: tp=8 pp=2
# no-warnings
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
echo "reminder: --tensor-model-parallel-size 16 spans nodes here; this run uses 8 x 2"
  printf 'not --tp 16 (%s)\n' "$SLURM_JOB_ID" >&2
srun torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
