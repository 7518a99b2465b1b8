#!/bin/bash
# case: transformers tp_plan="auto" (native TP across all local ranks) on one node; Python heredoc reads WORLD_SIZE
# site: dgx-h100
# expect: accept
# shape: -N1 --gpus-per-node=8
#SBATCH -N1
#SBATCH --gpus-per-node=8
#SBATCH -t 00:30:00

cat > tp_generate.py <<'PY'
import os
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

model_id = "meta-llama/Meta-Llama-3-70B-Instruct"
model = AutoModelForCausalLM.from_pretrained(model_id, tp_plan="auto", torch_dtype=torch.bfloat16)
tok = AutoTokenizer.from_pretrained(model_id)
if int(os.environ.get("RANK", 0)) == 0:
    print("tensor parallel over", os.environ.get("WORLD_SIZE"), "GPUs")
ids = tok("The capital of France is", return_tensors="pt").input_ids.to(model.device)
print(tok.decode(model.generate(ids, max_new_tokens=20)[0]))
PY
torchrun --nproc-per-node 8 tp_generate.py
