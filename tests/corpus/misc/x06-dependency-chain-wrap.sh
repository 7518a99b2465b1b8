#!/bin/bash
# case: a driver job that submits later stages with sbatch --wrap; the driver itself is a 1-task CPU job
# site: dgx-h100
# expect: accept
# shape: -n1 -c2 (no GPUs)
#SBATCH -n1
#SBATCH -c2
#SBATCH -t 00:10:00

prep=$(sbatch --parsable -c 32 --wrap "python prep.py")
train=$(sbatch --parsable --dependency=afterok:$prep train_tp8.sbatch)
sbatch --dependency=afterok:$train --gpus=1 --wrap "python eval.py --ckpt /scratch/ckpt/latest"
echo "chain: $prep -> $train"
