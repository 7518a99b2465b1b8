#!/bin/bash
# case: the site turned the policy off for SGLang
# site: lab
# expect: accept
# no-warnings
# launcher: sglang
#SBATCH -N2 --gpus-per-node=8
python -m sglang.launch_server --model-path m --tp 16 --nnodes 2
