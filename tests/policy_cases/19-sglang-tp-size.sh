#!/bin/bash
# case: SGLang --tp-size=16
# site: dgx-h100
# expect: reject
# message: TP=16
# launcher: sglang
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
python -m sglang.launch_server --model-path m --tp-size=16 --nnodes 2
