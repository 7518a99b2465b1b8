#!/bin/bash
# case: true positive: accelerate's Megatron-LM plugin config with megatron_lm_tp_degree: 16 over two 8-GPU nodes
# site: dgx-h100
# expect: reject
# rule: tp-exceeds-domain
# message: TP=16
# shape: -N2 --ntasks-per-node=1 --gpus-per-node=8
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=10:00:00

export NCCL_IB_HCA=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11
export NCCL_SOCKET_IFNAME=bond0
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)

cat > megatron_tp16.yaml <<EOF_YAML
compute_environment: LOCAL_MACHINE
distributed_type: MEGATRON_LM
megatron_lm_config:
  megatron_lm_num_micro_batches: 2
  megatron_lm_pp_degree: 1
  megatron_lm_sequence_parallelism: true
  megatron_lm_tp_degree: 16
main_process_ip: $head
main_process_port: 29500
mixed_precision: bf16
num_machines: 2
num_processes: 16
EOF_YAML

srun bash -c 'accelerate launch --config_file megatron_tp16.yaml --machine_rank $SLURM_PROCID \
    examples/by_feature/megatron_lm_gpt_pretraining.py --config_name gpt2-xl \
    --tokenizer_name gpt2-xl --dataset_name wikitext --output_dir /scratch/megatron_lm_gpt'
