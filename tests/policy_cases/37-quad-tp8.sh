#!/bin/bash
# case: 4-GPU nodes: TP=8 is larger than the NVLink domain
# site: lab
# expect: reject
# message: TP=8
# message: partition 'quad' (4 GPUs per node
# message: use TP=4 and PP=2
#SBATCH -p quad -N4 --gpus-per-node=4
export NCCL_NET="AWS Libfabric"
export NCCL_SOCKET_IFNAME=hsn
srun python train.py --tensor-model-parallel-size 8
