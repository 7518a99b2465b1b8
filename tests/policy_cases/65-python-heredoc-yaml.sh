#!/bin/bash
# case: a NeMo YAML written by the script (key: value)
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
cat > cfg.yaml <<EOF
model:
  tensor_model_parallel_size: 16
EOF
srun python megatron_gpt_pretraining.py --config-path . --config-name cfg
