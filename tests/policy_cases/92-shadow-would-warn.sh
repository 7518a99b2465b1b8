#!/bin/bash
# slurmgpu: site=lab tp=4 pp=4 dp=1 cp=1 ep=1 nodes=2 gpus_per_node=8
# case: shadow mode: a warning (fewer GPUs per node than planned) is kept from the user too; would-be verdict warn
# site: lab-shadow
# expect: accept
# no-warnings
# would: warn
# shadow-warning: needs 8 GPUs per node
# rule: gpus-below-layout
#SBATCH -p h100 -N4 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py
