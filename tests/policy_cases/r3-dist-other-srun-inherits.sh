#!/bin/bash
# case: one srun says --distribution=block, the launch srun does not: it takes SLURM_DISTRIBUTION=cyclic
# site: dgx-h100
# env: SLURM_DISTRIBUTION=cyclic
# expect: reject
# rule: tp-spans-nodes
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --distribution=block --ntasks-per-node=1 hostname
srun python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
