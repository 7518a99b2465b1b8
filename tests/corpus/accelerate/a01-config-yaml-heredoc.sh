#!/bin/bash
# case: accelerate launch with a multi-node config yaml written by heredoc (FSDP, 2 machines x 8 processes)
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8 --cpus-per-task=96
#SBATCH --job-name=accel-fsdp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=96
#SBATCH --time=06:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

MAIN_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)

cat > fsdp_config.yaml <<YAML
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_use_orig_params: true
machine_rank: 0
main_process_ip: $MAIN_HOST
main_process_port: 29500
main_training_function: main
mixed_precision: bf16
num_machines: 2
num_processes: 16
rdzv_backend: c10d
same_network: true
use_cpu: false
YAML

srun bash -c 'accelerate launch --config_file fsdp_config.yaml \
    --machine_rank $SLURM_NODEID \
    train_clm.py --model_name_or_path meta-llama/Llama-2-13b-hf \
    --dataset_name wikitext --dataset_config_name wikitext-103-raw-v1 \
    --per_device_train_batch_size 2 --num_train_epochs 1 --output_dir /scratch/out'
