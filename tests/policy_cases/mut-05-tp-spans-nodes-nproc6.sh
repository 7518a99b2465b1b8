#!/bin/bash
# case: torchrun starts 6 ranks per 8-GPU node: TP=4 divides the NVLink domain but not the ranks per node, so ranks 4-7 straddle nodes 0-1
# site: dgx-h100
# expect: reject
# rule: tp-spans-nodes
# not-rule: tp-exceeds-domain
# message: ranks 4-7 of one TP group land on nodes 0-1
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun torchrun --nproc-per-node 6 pretrain_gpt.py --tensor-model-parallel-size 4
