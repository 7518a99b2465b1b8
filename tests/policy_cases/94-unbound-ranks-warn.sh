#!/bin/bash
# case: a multi-node job on two-socket nodes (verified map) whose steps bind no rank: accepted with a warning
# site: lab-numa
# expect: accept
# warning: binds no rank to CPUs
# rule: unbound-ranks
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_1 NCCL_SOCKET_IFNAME=bond0
srun torchrun --nnodes=2 --nproc-per-node=8 train.py --tensor-model-parallel-size 8
