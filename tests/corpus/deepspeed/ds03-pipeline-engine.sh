#!/bin/bash
# case: DeepSpeed PipelineModule training, pipeline stages set by --pipeline-parallel-size 4 on 4 nodes (no TP)
# site: dgx-h100
# expect: accept
# shape: -N4 --ntasks-per-node=1 --gres=gpu:8
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --time=8:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0

scontrol show hostnames "$SLURM_JOB_NODELIST" | awk '{print $1" slots=8"}' > hosts.txt

deepspeed --hostfile=hosts.txt --num_nodes=4 --num_gpus=8 train_pipe.py \
    --deepspeed_config=ds_pipe.json \
    --pipeline-parallel-size 4 \
    --steps 20000 -p 4
