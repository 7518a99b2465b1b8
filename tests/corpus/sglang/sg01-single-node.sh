#!/bin/bash
# case: SGLang launch_server on one node with --tp-size 8
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8
#SBATCH -N1
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00

python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct \
    --tp-size 8 --port 30000 --host 0.0.0.0 --mem-fraction-static 0.85
