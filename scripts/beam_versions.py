"""Our beam 5 (CTranslate2's stopping rule) on test_2016 for several versions of the code,
each in its own process: sentences/s (median of 5 after a warm-up) and a hash of the outputs.

    for v in 00ac9c7 fd87cf5 e1051f3 ed1b140; do git worktree add /tmp/wt-$v $v; done
    python scripts/beam_versions.py /tmp/wt-00ac9c7 /tmp/wt-fd87cf5 /tmp/wt-e1051f3 /tmp/wt-ed1b140 .
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = """
import hashlib, os, sys, time
import torch
torch.set_num_threads(2)
from scripts.bench.decode import make_batches, ours_engine, read_test_sources, source_ids
from seq2seq.checkpoint import build_model
from seq2seq.data.tokenizer import TokenizerPair
ckpt = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
model = build_model(ckpt)
texts = read_test_sources(ckpt, sys.argv[2])
ids = source_ids(texts, TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"]), model.arch)
batches = make_batches(ids, 2000, model.arch)
engine = ours_engine(model, 5, stopping="patience")
engine(batches[:1])
load = os.getloadavg()[0]
times = []
for _ in range(5):
    start = time.perf_counter(); hyps = engine(batches); times.append(time.perf_counter() - start)
times.sort()
print(f"{len(texts) / times[2]:.1f} sent/s (median of 5, {times[0]:.2f}-{times[-1]:.2f} s), "
      f"load {load:.2f} -> {os.getloadavg()[0]:.2f}, outputs {hashlib.md5(str(hyps).encode()).hexdigest()[:8]}")
"""


def main(roots: list[str]) -> None:
    repo = Path(__file__).resolve().parents[1]
    ckpt, data = repo / "data/models/multi30k_de_en_tiny.ckpt", repo / "data/multi30k"
    for root in roots:
        out = subprocess.run([sys.executable, "-c", CHILD, str(ckpt), str(data)], cwd=root,
                             env={"PYTHONPATH": str(Path(root).resolve()), "PATH": "/usr/bin:/bin",
                                  "HF_DATASETS_OFFLINE": "1"},
                             capture_output=True, text=True, check=True)
        print(f"{root}: {out.stdout.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main(sys.argv[1:])
