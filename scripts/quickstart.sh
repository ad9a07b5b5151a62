#!/usr/bin/env bash
# The main job: train Tiny De->En on the shipped Multi30k for 1,000 updates (~25 minutes on 2
# quiet AMD EPYC cores), translate three sentences with it and with the shipped model, and print BLEU
# on test_2016_flickr. Run from the repository root.
set -euo pipefail
export HF_DATASETS_OFFLINE=1
# a fresh run each time: an earlier one is kept aside, not overwritten (seq2seq-train refuses to)
if [ -e runs/quickstart ]; then mv runs/quickstart "runs/quickstart.$(date +%Y%m%d-%H%M%S)"; fi
seq2seq-train fit --config configs/multi30k_de_en_tiny.yaml --config configs/quickstart.yaml
ckpt=runs/quickstart/checkpoints/last.ckpt
shipped=data/models/multi30k_de_en_tiny.ckpt
src=("Ein Mann fährt Fahrrad." "Zwei Hunde spielen im Schnee." "Eine Frau liest ein Buch im Park.")
mapfile -t ours < <(printf '%s\n' "${src[@]}" | seq2seq-translate -m "$ckpt" --beam 5)
mapfile -t theirs < <(printf '%s\n' "${src[@]}" | seq2seq-translate -m "$shipped" --beam 5)
for i in "${!src[@]}"; do
  printf '%s\n  this run (1,000 updates): %s\n  shipped model (2 hours):  %s\n' "${src[$i]}" "${ours[$i]}" "${theirs[$i]}"
done
seq2seq-evaluate -m "$ckpt" --test-set multi30k --split test_2016_flickr --beam 5 --json runs/quickstart/test_2016_flickr.json
