#!/bin/bash
# case: accelerate's Megatron-LM plugin spells TP megatron_lm_tp_degree (config yaml key and CLI flag): 16 on 2x8 spans
# site: dgx-h100
# expect: reject
# message: TP=16
# rule: tp-exceeds-domain
# layout: tp=16 pp=1
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
cat > megatron.yaml <<EOF_YAML
distributed_type: MEGATRON_LM
megatron_lm_config:
  megatron_lm_pp_degree: 1
  megatron_lm_tp_degree: 16
EOF_YAML
srun accelerate launch --config_file megatron.yaml train.py
