#!/bin/bash
# case: issue 16 class 8: the fix for SGLang is written in SGLang's flags
# site: dgx-h100
# expect: reject
# launcher: sglang
# message: i.e. --tp-size 8 --pp-size 2
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python -m sglang.launch_server --model-path m --tp-size 16
