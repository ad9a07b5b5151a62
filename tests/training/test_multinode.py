"""Multi-node training: 2 nodes x 1 process on 127.0.0.1, Lightning's own launch; each rank
reads its own shard of the batches, both agree, and a checkpoint resumes on both."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT, text_config, write_corpus

from seq2seq.config import TokenizerConfig
from seq2seq.data import prepare
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.data.sampler import TokenBudgetSampler

DATA = ROOT / "data" / "multi30k"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_nodes(args: list[str], out: Path, timeout: int = 240) -> list[dict]:
    """``seq2seq-train`` as node 0 and node 1 (one process each), as a launcher such as
    SLURM would start it: MASTER_ADDR, MASTER_PORT, NODE_RANK, WORLD_SIZE."""
    port = _free_port()
    procs = []
    for node in (0, 1):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": str(node),
               "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        env.pop("LOCAL_RANK", None)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "seq2seq.cli.train", "fit", *args, "--trainer.num_nodes", "2",
             "--trainer.devices", "1", "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        log = p.communicate(timeout=timeout)[0]
        assert p.returncode == 0, log[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_two_nodes_read_disjoint_shards_agree_and_resume(tmp_path):
    """Each rank trains on exactly its shard of the token-budget batches (disjoint), both
    end with the same weights, and rank 0's checkpoint resumes on both nodes."""
    src, tgt = write_corpus(tmp_path, 800)
    cfg = text_config(str(src), str(tgt), tmp_path / "cache", tokenizer=TokenizerConfig(vocab_size=400),
                      max_tokens=1024)
    dm = Seq2SeqDataModule(cfg)  # prepared here, so the two nodes start on a warm cache
    dm.prepare_data()
    dm.setup("fit")
    lengths = [prepare.column(dm.train_dataset, c) + 1 for c in ("src_len", "tgt_len")]
    shards = [[b.tolist() for b in TokenBudgetSampler(*lengths, 1024, seed=cfg.seed, num_replicas=2, rank=r).batches(0)]
              for r in (0, 1)]

    recorder = tmp_path / "recorder.yaml"
    common = ["--config", str(ROOT / "configs" / "smoke.yaml"), "--config", str(recorder),
              "--data.data.corpus", "null", "--data.data.train_src", str(src), "--data.data.train_tgt", str(tgt),
              "--data.data.valid_src", str(DATA / "val.de.gz"), "--data.data.valid_tgt", str(DATA / "val.en.gz"),
              "--data.data.cache_dir", str(tmp_path / "cache"), "--data.data.tokenizer.vocab_size", "400",
              "--trainer.num_sanity_val_steps", "0", "--trainer.limit_val_batches", "1",
              "--model.val_bleu_max_sentences", "4", "--trainer.default_root_dir", str(tmp_path / "run")]
    def run(name: str, steps: int, *extra: str) -> list[dict]:
        recorder.write_text(f"trainer:\n  callbacks:\n    - class_path: rank_recorder.RankRecorder\n"
                            f"      init_args:\n        out: {tmp_path / name}\n")
        return _run_two_nodes([*common, "--trainer.max_steps", str(steps),
                               "--trainer.val_check_interval", str(steps), *extra], tmp_path / name)

    first = run("first", 4)
    checkpoint = tmp_path / "step4.ckpt"  # written by rank 0 (the run goes on writing last.ckpt)
    shutil.copy(tmp_path / "run/checkpoints/last.ckpt", checkpoint)
    resumed = run("resumed", 6, "--ckpt_path", str(checkpoint))
    for rank, (a, b) in enumerate(zip(first, resumed, strict=True)):
        assert a["world_size"] == 2 and a["node_rank"] == rank
        assert a["ids"] == shards[rank][:4] and b["ids"] == shards[rank][4:6]  # its shard, in order
    assert not {i for b in first[0]["ids"] for i in b} & {i for b in first[1]["ids"] for i in b}
    assert first[0]["end"] == first[1]["end"] and first[0]["end"]["step"] == 4
    saved = torch.load(checkpoint, weights_only=True)["state_dict"]
    from rank_recorder import weights_digest

    in_file = weights_digest({k.removeprefix("model."): v for k, v in saved.items()})
    assert resumed[0]["start"] == resumed[1]["start"] == {"step": 4, "weights": in_file}
    assert resumed[0]["end"] == resumed[1]["end"] and resumed[0]["end"]["step"] == 6
