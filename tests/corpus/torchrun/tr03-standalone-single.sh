#!/bin/bash
# case: torchrun --standalone on one node with --nproc_per_node=gpu
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8 --exclusive
#SBATCH -N1
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --time=02:00:00

module load cuda/12.4 2>/dev/null || true
source ~/venvs/torch/bin/activate

torchrun --standalone --nproc_per_node=gpu train_gpt2.py \
    --input_bin "data/fineweb10B/fineweb_train_*.bin" --batch_size 64 --sequence_length 1024 \
    --num_iterations 5000 --learning_rate 0.0018 --warmup_iters 250
