#!/bin/bash
# case: an environment prefix at the start of a bash -c command string still counts (TP=16 on 2x8)
# site: dgx-h100
# expect: reject
# message: TP=16
# rule: tp-exceeds-domain
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun bash -c "MASTER_PORT=6000 TP=16 ./megatron_wrapper.sh --model llama-70b"
