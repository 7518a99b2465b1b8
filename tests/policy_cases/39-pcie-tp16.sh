#!/bin/bash
# case: PCIe nodes have an NVLink domain of 1: TP=16 is refused, the fix keeps TP x PP
# site: lab
# expect: reject
# message: would run over PCIe
# message: PCIe only
# message: use TP=1 and PP=16
#SBATCH -p pcie -N2 --gpus-per-node=8
export NCCL_SOCKET_IFNAME=eth0
srun python train.py --tensor-model-parallel-size 16
