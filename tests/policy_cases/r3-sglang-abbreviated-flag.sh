#!/bin/bash
# case: SGLang's parser takes the unambiguous prefix --tensor-parallel for --tensor-parallel-size
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python -m sglang.launch_server --model-path m --tensor-parallel 16 --nnodes 2 --node-rank $SLURM_NODEID
