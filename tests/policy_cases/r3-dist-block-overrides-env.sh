#!/bin/bash
# case: an explicit --distribution=block on the srun line wins over SLURM_DISTRIBUTION (what gen writes)
# site: dgx-h100
# env: SLURM_DISTRIBUTION=cyclic
# expect: accept
# not-rule: tp-spans-nodes
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --distribution=block python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
