#!/bin/bash
# case: --nproc-per-node=gpu and $SLURM_GPUS_ON_NODE mean one rank per GPU
# site: dgx-h100
# expect: accept
# no-warnings
# layout: tp=8 pp=2
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nnodes 2 --nproc-per-node=gpu train.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
srun torchrun --nnodes 2 --nproc-per-node $SLURM_GPUS_ON_NODE eval.py --tensor-model-parallel-size 8
