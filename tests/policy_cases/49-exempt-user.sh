#!/bin/bash
# case: exempt user
# site: lab
# user: alice
# expect: accept
# no-warnings
# rule: exempt
#SBATCH -N2 --gpus-per-node=8
srun python train.py --tensor-model-parallel-size 16
