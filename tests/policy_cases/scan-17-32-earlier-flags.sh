#!/bin/bash
# case: issue 16 class 4: 32 earlier --tensor-model-parallel-size 1 lines do not hide the TP=16 one
# site: dgx-h100
# expect: reject
# message: TP=16
# warning: filter limit
# layout: tp=16
#SBATCH -N2 --gpus-per-node=8
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 1
srun python pretrain_gpt.py --tensor-model-parallel-size 16
