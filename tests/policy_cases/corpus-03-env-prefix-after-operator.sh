#!/bin/bash
# case: environment prefixes after 'then', '&&' and 'env' are real (TP=16 on 2x8 in every branch)
# site: dgx-h100
# expect: reject
# message: TP=16
# rule: tp-exceeds-domain
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
cd /scratch/run && env TP=16 PP=1 srun ./megatron_wrapper.sh
