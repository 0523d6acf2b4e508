#!/usr/bin/env bash
# `make demo`: the whole pipeline on the embedded all-MiniLM-L6-v2 and the SciFact slice in demo/data.
# Every step is a plain embedctl command on configs/demo.yaml; nothing here is demo-only logic.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
CFG=configs/demo.yaml
RUN=runs/demo
DATA=demo/data/scifact-mini
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
start=$(date +%s)

step "1/7 pretokenize: $DATA -> $RUN/tokens"
embedctl pretokenize $CFG --overwrite

step "2/7 prebatch: token cache + train qrels -> $RUN/batches (2 mined hard negatives per query)"
embedctl prebatch $CFG --overwrite

step "3/7 zero-shot baseline: dense index of the untrained model, ranking of the test queries"
embedctl index $CFG --name zero-shot --overwrite
embedctl search $CFG --index $RUN/indexes/zero-shot --output $RUN/ranking-zero-shot.tsv

step "4/7 train: short fine-tune -> $RUN/train/final"
embedctl train $CFG train.resume=never output.overwrite=true

step "5/7 index the fine-tuned model"
embedctl index $CFG --name fine-tuned --model $RUN/train/final --overwrite

step "6/7 search a few example queries"
for q in "Vitamin D deficiency is linked to multiple sclerosis." \
         "Antibiotics disrupt the gut microbiome." ; do
  embedctl search $CFG --index $RUN/indexes/fine-tuned search.queries=null search.qrels=null -k 3 "$q"
done

step "7/7 evaluate on the held-out test queries: before vs after training"
embedctl search $CFG --index $RUN/indexes/fine-tuned --output $RUN/ranking-fine-tuned.tsv
embedctl evaluate --qrels $DATA/qrels/test.tsv --run $RUN/ranking-zero-shot.tsv --run $RUN/ranking-fine-tuned.tsv

step "artifacts"
cat <<EOT
token cache        $RUN/tokens
pre-batched data   $RUN/batches
trained model      $RUN/train/final   (checkpoints: $RUN/train/checkpoints, metrics: $RUN/train/metrics.jsonl)
indexes            $RUN/indexes/zero-shot, $RUN/indexes/fine-tuned
rankings           $RUN/ranking-zero-shot.tsv, $RUN/ranking-fine-tuned.tsv
demo finished in $(( $(date +%s) - start )) s
EOT
