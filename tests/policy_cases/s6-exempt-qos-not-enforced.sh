#!/bin/bash
# case: --qos=admin is exempt in the site config, but accounting does not validate --qos here: checked
# site: lab-noacct
# args: --qos=admin
# expect: reject
# message: TP=16
# warning: QOS 'admin' is exempt in the site config
# rule: exempt-not-honoured
#SBATCH -N2 --gpus-per-node=8
srun python train.py --tensor-model-parallel-size 16
