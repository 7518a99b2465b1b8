#!/bin/bash
# case: true positive: accelerate launch --use_megatron_lm --megatron_lm_tp_degree 16 on two 8-GPU nodes
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH -N2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH -t 04:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun accelerate launch --use_megatron_lm --megatron_lm_tp_degree 16 --megatron_lm_pp_degree 1 \
    --num_machines 2 --num_processes 16 --machine_rank "$SLURM_NODEID" \
    --main_process_ip "$MASTER" --main_process_port 29500 \
    train_megatron.py --model_name_or_path gpt2-xl
