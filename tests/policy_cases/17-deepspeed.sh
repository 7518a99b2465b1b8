#!/bin/bash
# case: Megatron-DeepSpeed under the deepspeed launcher
# site: dgx-h100
# expect: reject
# message: TP=16
# launcher: deepspeed
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
deepspeed --num_nodes 2 --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size 16 --deepspeed_config ds.json
