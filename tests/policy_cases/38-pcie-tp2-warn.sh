#!/bin/bash
# case: multi-node on PCIe-only GPUs: accepted with a warning
# site: lab
# expect: accept
# warning: PCIe-only
# rule: pcie-multinode
#SBATCH -p pcie -N2 --gpus-per-node=8
export NCCL_SOCKET_IFNAME=eth0
srun python train.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8
