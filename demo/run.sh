#!/usr/bin/env bash
# `make demo`: the whole pipeline on the embedded all-MiniLM-L6-v2 and the SciFact slice in demo/data.
# Every step is a plain embedctl command on configs/demo.yaml; nothing here is demo-only logic.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
CFG=configs/demo.yaml
RUN=runs/demo
DATA=demo/data/scifact-mini
# each stage's wall seconds, printed as it ends and summed up at the end (the demo's budget: 10 minutes
# on a quiet 2-core machine)
TIMES=()
stage_name="" stage_start=$(date +%s)
end_stage() {
  if [ -n "$stage_name" ]; then
    local s=$(( $(date +%s) - stage_start ))
    TIMES+=("$(printf '%5d s  %s' "$s" "$stage_name")")
    printf '(%s: %d s)\n' "${stage_name%%:*}" "$s"
  fi
}
step() { end_stage; stage_name="$*"; stage_start=$(date +%s); printf '\n\033[1m== %s\033[0m\n' "$*"; }
start=$(date +%s)

step "1/12 pretokenize: $DATA -> $RUN/tokens"
embedctl pretokenize $CFG --overwrite

step "2/12 prebatch: token cache + train qrels -> $RUN/batches (1 mined hard negative per query)"
embedctl prebatch $CFG --overwrite

step "3/12 zero-shot baseline: dense index of the untrained model, ranking of the test queries"
embedctl index $CFG index.name=zero-shot index.overwrite=true
embedctl search $CFG --index $RUN/indexes/zero-shot --output $RUN/ranking-zero-shot.tsv

step "4/12 train: short fine-tune -> $RUN/train/final"
embedctl train $CFG train.resume=never output.overwrite=true

step "5/12 index the fine-tuned model"
embedctl index $CFG index.name=fine-tuned model.name_or_path=$RUN/train/final index.overwrite=true

step "6/12 search a few example queries"
for q in "Vitamin D deficiency is linked to multiple sclerosis." \
         "Antibiotics disrupt the gut microbiome." ; do
  embedctl search $CFG --index $RUN/indexes/fine-tuned search.queries=null search.qrels=null -k 3 "$q"
done

embedctl search $CFG --index $RUN/indexes/fine-tuned --output $RUN/ranking-fine-tuned.tsv

# --- the ColBERT track: every step on $COL, which holds the ColBERT model settings (markers, lengths, 128-d head)
COL=demo/colbert.yaml
step "7/12 ColBERT pretokenize + prebatch: ColBERT ids, 1 hard negative per query mined by minilm (bi-encoder)"
embedctl pretokenize $COL --overwrite
embedctl prebatch $COL --overwrite

step "8/12 untrained ColBERT (fresh 128-d head): PLAID index, ranking of the test queries"
embedctl index $COL index.name=colbert-untrained index.overwrite=true
embedctl search $COL --index $RUN/indexes/colbert-untrained --output $RUN/ranking-colbert-untrained.tsv

step "9/12 ColBERT fine-tune -> $RUN/colbert/train/final"
embedctl train $COL train.resume=never output.overwrite=true

step "10/12 PLAID index of the trained ColBERT (2-bit residuals)"
embedctl index $COL index.name=colbert-trained model.name_or_path=$RUN/colbert/train/final index.overwrite=true

step "11/12 search it"
embedctl search $COL --index $RUN/indexes/colbert-trained search.queries=null search.qrels=null -k 3 \
  "Vitamin D deficiency is linked to multiple sclerosis."
embedctl search $COL --index $RUN/indexes/colbert-trained --output $RUN/ranking-colbert-trained.tsv

step "12/12 evaluate on the held-out test queries: dense zero-shot / fine-tuned, ColBERT untrained / trained"
embedctl evaluate --qrels $DATA/qrels/test.tsv --run $RUN/ranking-zero-shot.tsv --run $RUN/ranking-fine-tuned.tsv \
  --run $RUN/ranking-colbert-untrained.tsv --run $RUN/ranking-colbert-trained.tsv

end_stage; stage_name=""
printf '\n\033[1m== stage times\033[0m\n'
printf '%s\n' "${TIMES[@]}"
step "artifacts"
cat <<EOT
token caches       $RUN/tokens (dense), $RUN/colbert/tokens (ColBERT)
pre-batched data   $RUN/batches, $RUN/colbert/batches
trained models     $RUN/train/final, $RUN/colbert/train/final   (metrics: metrics.jsonl beside each)
indexes            $RUN/indexes/{zero-shot,fine-tuned} (dense), $RUN/indexes/{colbert-untrained,colbert-trained} (PLAID)
rankings           $RUN/ranking-{zero-shot,fine-tuned,colbert-untrained,colbert-trained}.tsv
demo finished in $(( $(date +%s) - start )) s
EOT
