#!/bin/bash
# case: PCIe nodes: TP must at least stay in one node
# site: lab
# expect: reject
# message: does not fit in one node
# message: PCIe only
#SBATCH -p pcie -N2 --gpus-per-node=8
export NCCL_SOCKET_IFNAME=eth0
srun python train.py --tensor-model-parallel-size 16
