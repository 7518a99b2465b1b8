#!/bin/bash
# case: exempt account (from #SBATCH -A)
# site: lab
# expect: accept
# rule: exempt
#SBATCH -N2 --gpus-per-node=8 -A benchmarks
srun python train.py --tensor-model-parallel-size 16
