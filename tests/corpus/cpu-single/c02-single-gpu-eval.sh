#!/bin/bash
# case: one GPU lm-eval-harness run, a case statement picks the task list; comments mention TP=16 evals elsewhere
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus=1 -c 8
#SBATCH --gpus=1
#SBATCH -c 8
#SBATCH -t 04:00:00
# The 405B evals run with TP=16 on the big partition; this one is a single GPU.

SUITE=${SUITE:-core}
case $SUITE in
    core) TASKS=hellaswag,arc_easy,arc_challenge,winogrande ;;
    math) TASKS=gsm8k,minerva_math ;;
    *) echo "unknown suite" >&2; exit 2 ;;
esac

lm_eval --model hf --model_args pretrained=/scratch/ckpt/hf-7b,dtype=bfloat16 \
    --tasks "$TASKS" --batch_size auto --output_path /scratch/evals/$SLURM_JOB_ID
