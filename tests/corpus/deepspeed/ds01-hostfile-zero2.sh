#!/bin/bash
# case: DeepSpeed launcher with a hostfile from scontrol, ZeRO-2 data parallel over 2 nodes (no model parallelism)
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=05:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

function makehostfile() {
perl -e '$slots=split /,/, $ENV{"SLURM_STEP_GPUS"};
$slots=8 if $slots==0;
@nodes = split /\n/, qx[scontrol show hostnames $ENV{"SLURM_JOB_NODELIST"}];
print map { "$b$_ slots=$slots\n" } @nodes'
}
makehostfile > hostfile

cat > ds_zero2.json <<'EOF_JSON'
{
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": 8,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.999], "eps": 1e-8}},
  "zero_optimization": {"stage": 2, "allgather_bucket_size": 5e8, "reduce_bucket_size": 5e8},
  "bf16": {"enabled": true}
}
EOF_JSON

deepspeed --hostfile hostfile --master_port 29600 train.py \
    --deepspeed --deepspeed_config ds_zero2.json \
    --model_name_or_path meta-llama/Llama-2-7b-hf --epochs 3
