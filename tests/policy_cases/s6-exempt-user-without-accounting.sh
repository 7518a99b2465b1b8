#!/bin/bash
# case: user exemptions need no accounting (the user name comes from the authenticated uid)
# site: lab-noacct
# user: alice
# expect: accept
# no-warnings
# rule: exempt
#SBATCH -N2 --gpus-per-node=8 -A benchmarks
srun python train.py --tensor-model-parallel-size 16
