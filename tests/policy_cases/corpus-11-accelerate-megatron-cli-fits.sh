#!/bin/bash
# case: accelerate launch --megatron_lm_tp_degree 8 --megatron_lm_pp_degree 2 on 2x8 fits the NVLink domain
# site: dgx-h100
# expect: accept
# layout: tp=8 pp=2
# no-warnings
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun accelerate launch --use_megatron_lm --megatron_lm_tp_degree 8 --megatron_lm_pp_degree 2 train.py
