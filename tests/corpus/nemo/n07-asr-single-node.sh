#!/bin/bash
# case: NeMo ASR (no model parallelism at all) on one node with trainer.devices=-1 and a manifest here-string check
# site: dgx-h100
# expect: accept
# shape: -N1 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH -N1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH -t 10:00:00

MANIFEST=/data/librispeech/train_clean_100.json
read -r first_line <<< "$(head -n1 "$MANIFEST")"
echo "first manifest entry: $first_line"

srun python /opt/NeMo/examples/asr/asr_ctc/speech_to_text_ctc_bpe.py \
    --config-path=../conf/conformer --config-name=conformer_ctc_bpe \
    model.train_ds.manifest_filepath="$MANIFEST" \
    model.validation_ds.manifest_filepath=/data/librispeech/dev_clean.json \
    model.tokenizer.dir=/data/tokenizers/spe_unigram_1024 \
    model.tokenizer.type=bpe \
    trainer.devices=-1 trainer.num_nodes=1 trainer.accelerator=gpu \
    trainer.strategy=ddp trainer.max_epochs=100 \
    exp_manager.exp_dir=/scratch/asr
