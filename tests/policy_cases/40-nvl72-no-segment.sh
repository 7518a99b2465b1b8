#!/bin/bash
# case: GB200 NVL72: TP=16 over 4 trays needs the job to stay inside one NVLink domain
# site: lab
# expect: reject
# message: add --segment=4
# message: NVLink domain of 72 GPUs = 18 nodes
# rule: tp-needs-segment
#SBATCH -p nvl72 -N4 --gpus-per-node=4
export NCCL_IB_HCA==mlx5_0,mlx5_1
srun python train.py --tensor-model-parallel-size 16
