#!/bin/bash
# case: -A benchmarks is exempt in the site config, but accounting does not validate -A here: checked
# site: lab-noacct
# expect: reject
# message: TP=16
# warning: account 'benchmarks' is exempt in the site config
# rule: exempt-not-honoured
# not-rule: exempt
#SBATCH -N2 --gpus-per-node=8 -A benchmarks
srun python train.py --tensor-model-parallel-size 16
