#!/bin/bash
# case: torchrun FSDP fine-tune (llama-recipes style) 4 nodes, --enable_fsdp, no tensor parallelism
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH -N 4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time 04:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export LOGLEVEL=INFO
export NCCL_DEBUG=WARN
export FI_PROVIDER="efa"

head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
srun torchrun --nproc_per_node 8 --nnodes 4 --rdzv_id $RANDOM --rdzv_backend c10d \
    --rdzv_endpoint "$head_node:29500" \
    recipes/finetuning.py --enable_fsdp --use_peft --peft_method lora \
    --model_name /models/Llama-2-70b-hf --fsdp_config.pure_bf16 \
    --output_dir /scratch/peft-70b --dist_checkpoint_root_folder /scratch/ckpt
