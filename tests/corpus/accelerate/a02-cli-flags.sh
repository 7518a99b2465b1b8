#!/bin/bash
# case: accelerate launch with --num_processes computed in shell arithmetic and --multi_gpu, 4 nodes, DDP
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=1 --gres=gpu:8
#SBATCH -N 4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH -t 04:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
GPUS_PER_NODE=8
NUM_PROCESSES=$(( SLURM_NNODES * GPUS_PER_NODE ))
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

export LAUNCHER="accelerate launch \
    --multi_gpu \
    --num_machines $SLURM_NNODES \
    --num_processes $NUM_PROCESSES \
    --main_process_ip $MASTER_ADDR \
    --main_process_port 29500 \
    --machine_rank \$SLURM_PROCID \
    --rdzv_backend c10d \
    --mixed_precision bf16 \
    "
export SCRIPT="run_glue_no_trainer.py --model_name_or_path roberta-large --task_name mnli --max_length 256 --per_device_train_batch_size 32 --output_dir /scratch/glue"
srun bash -c "$LAUNCHER $SCRIPT"
