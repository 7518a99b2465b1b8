#!/bin/bash
# case: --te is the shortest prefix SGLang's parser resolves to --tensor-parallel-size
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python -m sglang.launch_server --model-path m --te 16 --nnodes 2 --node-rank $SLURM_NODEID
