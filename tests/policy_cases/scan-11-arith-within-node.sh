#!/bin/bash
# case: issue 16 class 3: $((SLURM_JOB_NUM_NODES * SLURM_GPUS_PER_NODE / 2)) = 8 stays inside a node
# site: dgx-h100
# expect: accept
# layout: tp=8
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
TP=$(( SLURM_JOB_NUM_NODES * SLURM_GPUS_PER_NODE / 2 ))
srun vllm serve m --tensor-parallel-size "$TP"
