#!/bin/bash
# case: CPU array job (dedup shards) with a long data heredoc of shard paths and a here-string read
# site: dgx-h100
# expect: accept
# shape: --array=0-9 -n1 -c 16 (no GPUs)
#SBATCH --array=0-9
#SBATCH -n 1
#SBATCH -c 16
#SBATCH --mem=64G
#SBATCH -t 06:00:00

mapfile -t SHARDS <<'LIST'
/data/cc/2023-50/shard_000.jsonl.zst
/data/cc/2023-50/shard_001.jsonl.zst
/data/cc/2023-50/shard_002.jsonl.zst
/data/cc/2023-50/shard_003.jsonl.zst
/data/cc/2023-50/shard_004.jsonl.zst
/data/cc/2023-50/shard_005.jsonl.zst
/data/cc/2023-50/shard_006.jsonl.zst
/data/cc/2023-50/shard_007.jsonl.zst
/data/cc/2023-50/shard_008.jsonl.zst
/data/cc/2023-50/shard_009.jsonl.zst
LIST

IFS=/ read -r _ _ crawl snapshot _ <<< "${SHARDS[$SLURM_ARRAY_TASK_ID]}"
echo "dedup $crawl/$snapshot shard $SLURM_ARRAY_TASK_ID"
python dedup_minhash.py --input "${SHARDS[$SLURM_ARRAY_TASK_ID]}" \
    --output "/data/dedup/$(basename "${SHARDS[$SLURM_ARRAY_TASK_ID]}")" --num-perm 128 --threads 16
