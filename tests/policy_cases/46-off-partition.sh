#!/bin/bash
# case: policy off on a partition: nothing is checked
# site: lab
# expect: accept
# no-warnings
#SBATCH -p free -N2 --gpus-per-node=8
srun python train.py --tensor-model-parallel-size 16
