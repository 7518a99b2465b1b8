#!/bin/bash
# case: interactive-style Jupyter job on half a node (4 GPUs), no launcher at all
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=4 -c 32 --mem=500G
#SBATCH -N1
#SBATCH --gpus-per-node=4
#SBATCH -c 32
#SBATCH --mem=500G
#SBATCH -t 08:00:00
#SBATCH -J jupyter

PORT=$(shuf -i 8800-8999 -n 1)
echo "ssh -N -L $PORT:$(hostname):$PORT $USER@login.cluster"
jupyter lab --no-browser --ip=0.0.0.0 --port="$PORT"
