#!/bin/bash
# case: SGLang reads tp-size from the YAML file given to --config, which the script writes
# site: dgx-h100
# expect: reject
# message: TP=16
#SBATCH -N2 --gpus-per-node=8 --ntasks-per-node=1
export NCCL_IB_HCA==mlx5_0,mlx5_3
export NCCL_SOCKET_IFNAME=bond0
cat > server.yaml <<EOF
model-path: meta-llama/Llama-3.1-405B-Instruct
tp-size: 16
EOF
srun python -m sglang.launch_server --config server.yaml --nnodes 2 --node-rank $SLURM_NODEID
