#!/bin/bash
# case: 12 tasks at 8 per node need two nodes (Slurm rounds up): TP=12 spans them
# site: dgx-h100
# expect: reject
# message: TP=12
# rule: tp-exceeds-domain
# warning: the job's 16 GPUs are not a multiple of TP x PP x CP = 12x1x1 = 12
#SBATCH --ntasks=12 --ntasks-per-node=8 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 12
