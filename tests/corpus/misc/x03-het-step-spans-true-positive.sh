#!/bin/bash
# case: true positive: het job whose one step (srun --het-group=0,1) runs TP=16 over both 1-node components
# site: dgx-h100
# expect: reject
# rule: het-step
# message: TP=16
# shape: het: [-N1 --gpus-per-node=8] + [-N1 --gpus-per-node=8]
#SBATCH -t 01:00:00
#SBATCH -N1 --gpus-per-node=8
#SBATCH hetjob
#SBATCH -N1 --gpus-per-node=8

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
srun --het-group=0,1 python pretrain_gpt.py --tensor-model-parallel-size 16 --pipeline-model-parallel-size 1 \
    --num-layers 80 --hidden-size 8192 --num-attention-heads 64 --mock-data
