#!/bin/bash
# case: export TP_SIZE=8 used as "${TP_SIZE}"; the last assignment before the use counts
# site: dgx-h100
# env: TP_SIZE=32
# expect: accept
# no-warnings
# layout: tp=8 pp=2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
export TP_SIZE=16
export TP_SIZE=8
srun python pretrain_gpt.py --tensor-model-parallel-size "${TP_SIZE}" --pipeline-model-parallel-size 2
