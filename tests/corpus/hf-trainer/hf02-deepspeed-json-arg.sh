#!/bin/bash
# case: HF Trainer with --deepspeed ds_z3.json written inline, 2 nodes via srun + torchrun, node_rank from SLURM_PROCID
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=1-00:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)

cat > ds_z3.json <<'JSON'
{
  "bf16": {"enabled": "auto"},
  "zero_optimization": {
    "stage": 3,
    "overlap_comm": true,
    "stage3_gather_16bit_weights_on_model_save": true
  },
  "gradient_accumulation_steps": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "train_batch_size": "auto"
}
JSON

srun bash -c 'torchrun --nnodes 2 --nproc_per_node 8 --node_rank $SLURM_PROCID \
    --master_addr $MASTER_ADDR --master_port 29500 \
    train_sft.py --model_name_or_path meta-llama/Llama-2-70b-hf --deepspeed ds_z3.json \
    --per_device_train_batch_size 1 --gradient_accumulation_steps 8 --bf16 True \
    --output_dir /scratch/sft-70b --num_train_epochs 2 --learning_rate 1e-5 \
    --gradient_checkpointing True --report_to wandb'
