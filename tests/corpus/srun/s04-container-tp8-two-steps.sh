#!/bin/bash
# case: two srun steps in one job (preprocess on 1 task, then train TP=8 per node) with pyxis flags, 2 nodes
# site: dgx-h100
# expect: accept
# shape: -N2 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH -N2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH -t 04:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
IMAGE=nvcr.io/nvidia/pytorch:24.08-py3

srun -N1 -n1 --container-image=$IMAGE --container-mounts=/data:/data \
    python tools/preprocess_data.py --input /data/raw.jsonl --output-prefix /data/tok \
    --tokenizer-type GPT2BPETokenizer --vocab-file /data/vocab.json --merge-file /data/merges.txt --workers 32

srun --container-image=$IMAGE --container-mounts=/data:/data,/scratch:/scratch \
    python pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 \
    --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 256 \
    --data-path /data/tok_text_document --vocab-file /data/vocab.json --merge-file /data/merges.txt \
    --train-iters 1000 --bf16
