#!/usr/bin/env bash
# Evaluate a Multi30k training run on the three test sets:
#   the last snapshot (greedy, beam 5) and the average of its last 10 snapshots (beam 5).
# usage: bash scripts/eval_multi30k.sh RUN_DIR OUT_DIR [SNAPSHOT_DIR]
#   bash scripts/eval_multi30k.sh runs/multi30k_de_en_tiny data/results/multi30k_de_en_tiny
# The language pair comes from the checkpoint; SNAPSHOT_DIR defaults to the run's checkpoint
# folder (RUN_DIR/checkpoints: last.ckpt, the best by val BLEU and the step snapshots).
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:?usage: eval_multi30k.sh RUN_DIR OUT_DIR [SNAPSHOT_DIR]}
out=${2:?usage: eval_multi30k.sh RUN_DIR OUT_DIR [SNAPSHOT_DIR]}
snaps=${3:-$run/checkpoints}
mkdir -p "$out"
seq2seq-average -o "$run/avg_last10.ckpt" --force --last 10 "$snaps"  # replaces an earlier run of this script
last=$(ls "$snaps"/step*.ckpt | sort | tail -n 1)
cp "$last" "$run/last_snapshot.ckpt"
for split in test_2016_flickr test_2017_flickr test_2017_mscoco; do
  seq2seq-evaluate -m "$run/last_snapshot.ckpt" --split $split --quiet \
    --json "$out/$split.greedy.json" --hyp-dir "$out/hyps" --force
  seq2seq-evaluate -m "$run/last_snapshot.ckpt" "$run/avg_last10.ckpt" --split $split --beam 5 --quiet \
    --json "$out/$split.beam5.json" --hyp-dir "$out/hyps" --force
done
