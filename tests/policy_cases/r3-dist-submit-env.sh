#!/bin/bash
# case: SLURM_DISTRIBUTION=cyclic in the submitting shell reaches every srun of the job
# site: dgx-h100
# env: SLURM_DISTRIBUTION=cyclic
# expect: reject
# rule: tp-spans-nodes
# message: SLURM_DISTRIBUTION
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
