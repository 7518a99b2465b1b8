#!/bin/bash
# case: TP=2 inside each PCIe node of a multi-node job: the domain rule (1 GPU) refuses it, as the planner does
# site: lab
# expect: reject
# rule: tp-exceeds-domain
# message: TP=2
# message: would run over PCIe
# message: use TP=1 and PP=2
#SBATCH -p pcie -N2 --gpus-per-node=8
export NCCL_SOCKET_IFNAME=eth0
srun python train.py --tensor-model-parallel-size 2
