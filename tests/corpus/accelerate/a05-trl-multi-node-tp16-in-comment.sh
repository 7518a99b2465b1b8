#!/bin/bash
# case: TRL + accelerate multi-node; a commented-out line keeps an old --tp 16 variant; runs DDP only
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH -N2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH -t 12:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)

# old variant, for reference only:
# srun accelerate launch ... --tp 16 ...
srun accelerate launch \
    --num_machines 2 --num_processes 16 --machine_rank "$SLURM_NODEID" \
    --main_process_ip "$MASTER_ADDR" --main_process_port 29500 \
    trl/scripts/sft.py --model_name_or_path Qwen/Qwen2.5-7B \
    --dataset_name trl-lib/Capybara --learning_rate 2e-5 --output_dir /scratch/qwen-sft
