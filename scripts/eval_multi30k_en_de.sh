#!/usr/bin/env bash
# Evaluate the En->De Tiny long run: last checkpoint (greedy, beam 5), average of the last 10 snapshots (beam 5)
set -euo pipefail
cd "$(dirname "$0")/.."
run=runs/multi30k_en_de_tiny
snaps=$run/lightning_logs/version_0/checkpoints
out=data/results/multi30k_en_de_tiny
mkdir -p $out
seq2seq-average -o $run/avg_last10.ckpt --last 10 $snaps
last=$(ls $snaps/step*.ckpt | sort | tail -n 1)
cp $last $run/last_snapshot.ckpt
for split in test_2016_flickr test_2017_flickr test_2017_mscoco; do
  seq2seq-evaluate -c $run/last_snapshot.ckpt --split $split --quiet --json $out/$split.greedy.json --hyp-dir $out/hyps
  seq2seq-evaluate -c $run/last_snapshot.ckpt $run/avg_last10.ckpt --split $split --beam 5 --quiet --json $out/$split.beam5.json --hyp-dir $out/hyps
done
