#!/bin/bash
# case: --gres=gpu:h100:8 and SGLang's --tp
# site: dgx-h100
# expect: reject
# message: TP=16
# launcher: sglang
#SBATCH -N2
#SBATCH --gres=gpu:h100:8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun --ntasks-per-node=1 python -m sglang.launch_server --model-path m --tp 16 --nnodes 2 --node-rank $SLURM_NODEID
