#!/bin/bash
# case: one PCIe node: nothing crosses the network, so TP=8 is the user's choice
# site: lab
# expect: accept
#SBATCH -p pcie -N1 --gpus-per-node=8
srun python train.py --tensor-model-parallel-size 8
