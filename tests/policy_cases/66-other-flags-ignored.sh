#!/bin/bash
# case: look-alike options (--tpu, --app-size, --top-p) are not TP flags
# site: dgx-h100
# expect: accept
# source: none
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python x.py --tpu 16 --top-p 16 --app-size 16 --step-tp 16 --dp-mode 3
