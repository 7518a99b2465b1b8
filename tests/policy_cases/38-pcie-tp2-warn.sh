#!/bin/bash
# case: multi-node on PCIe-only GPUs with TP=1: accepted with a warning
# site: lab
# expect: accept
# warning: PCIe-only
# rule: pcie-multinode
#SBATCH -p pcie -N2 --gpus-per-node=8
export NCCL_SOCKET_IFNAME=eth0
srun python train.py --tensor-model-parallel-size 1 --pipeline-model-parallel-size 16
