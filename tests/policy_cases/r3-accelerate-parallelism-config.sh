#!/bin/bash
# case: accelerate parallelism_config_tp_size in the YAML config the script writes
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
cat > accelerate.yaml <<EOF
distributed_type: FSDP
num_machines: 2
num_processes: 16
parallelism_config:
  parallelism_config_tp_size: 16
  parallelism_config_dp_shard_size: 1
EOF
srun accelerate launch --config_file accelerate.yaml train.py
