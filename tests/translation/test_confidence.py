"""How sure a translation is: the confidence is the geometric-mean token probability, the
JSONL output carries it, outputs below ``--warn-below`` (the shipped models' stored threshold
by default) are flagged "unsure" and counted in one warning; the default decoding stops the
shipped model's loops."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import DE_EN, run_main

from seq2seq.cli import translate as translate_cli

SHIPPED = {"de_en": DE_EN}


IN_DOMAIN = "Zwei Hunde spielen im Schnee."  # a short image caption, like Multi30k's


OUT_OF_DOMAIN = "Wie viel kostet das?"  # everyday German, unlike any caption


LOOPING = "Die Geschwindigkeitsbegrenzung auf Autobahnen wird kontrovers diskutiert."


@pytest.fixture(scope="module")
def de_en():
    from seq2seq import Translator

    return Translator.from_checkpoint(SHIPPED["de_en"])


def test_confidence_is_the_geometric_mean_token_probability(de_en):
    """Against a teacher-forced pass over the 1-best (not the search's own sums)."""
    from seq2seq.data.batch import collate_src, collate_tgt_in
    from seq2seq.decoding.search import search

    texts = [IN_DOMAIN, OUT_OF_DOMAIN, "Ein Mann fährt Fahrrad."]
    results = de_en.translate_full(texts)
    arch, tok = de_en.model.arch, de_en.tokenizers
    for text, r in zip(texts, results):
        src = collate_src(tok.src.encode([text]), arch.pad_id, arch.eos_id)
        out = search(de_en.model, src, de_en.decoding).hypotheses[0][0].tokens + [arch.eos_id]
        tgt_in = collate_tgt_in([out[:-1]], arch.pad_id, arch.bos_id)
        with torch.no_grad():
            lp = de_en.model(src, tgt_in).log_softmax(-1)[0].gather(1, torch.tensor(out)[:, None])
        assert r.confidence == pytest.approx(math.exp(lp.mean().item()), abs=1e-4)
        assert r.confidence == pytest.approx(math.exp(r.score), abs=1e-6)  # average penalty
    assert results[0].confidence > 0.7 > 0.5 > results[1].confidence


def test_jsonl_confidence_and_warn_below(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["-m", str(SHIPPED["de_en"]), "--output-format", "jsonl", "--warn-below", "0.5"]
    code, out, err = run_main(translate_cli.main, argv, stdin=f"{IN_DOMAIN}\n{OUT_OF_DOMAIN}\n\n".encode())
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [0 < r["confidence"] <= 1 for r in records] == [True] * 3
    assert records[0]["confidence"] > 0.5 > records[1]["confidence"]
    assert [r["flags"] for r in records] == [[], ["unsure"], []]
    warned = err.strip().splitlines()
    assert len(warned) == 1 and warned[0].startswith(
        "seq2seq-translate: warning: 1 of 3 output lines are unsure (line 2): confidence below 0.5")


def test_the_shipped_models_warn_by_default_and_0_turns_it_off():
    text = f"{IN_DOMAIN}\n{OUT_OF_DOMAIN}\n".encode()
    code, _, err = run_main(translate_cli.main, ["-m", str(SHIPPED["de_en"])], stdin=text)
    assert code == 0 and err.startswith("seq2seq-translate: warning: 1 of 2 output lines are unsure")
    code, _, err = run_main(translate_cli.main, ["-m", str(SHIPPED["de_en"]), "--warn-below", "0"],
                            stdin=text)
    assert code == 0 and err == ""


@pytest.mark.parametrize("value", ["1", "-0.5", "nan", "inf"])
def test_warn_below_outside_0_1_is_refused(value):
    code, out, err = run_main(translate_cli.main, ["-m", str(SHIPPED["de_en"]), "--warn-below", value, "x"])
    assert code == 2 and out == "" and err.count("\n") == 1 and f"--warn-below {float(value)}" in err


def test_help_says_what_the_shipped_models_know():
    text = " ".join(translate_cli.build_parser().format_help().split())
    assert "short image captions" in text and "--warn-below" in text
    assert "multi30k_de_en_tiny" in text  # -m takes a shipped model's name


def test_default_decoding_stops_the_shipped_models_loop(de_en):
    """Beam 5 loops on this sentence ("...establuousousousous...") without the rule; the
    default decoding has no n-gram of the default size twice."""
    import dataclasses

    from seq2seq.config import DecodingConfig

    n = DecodingConfig().no_repeat_ngram_size
    assert n > 0
    beam = DecodingConfig(method="beam")
    tok = de_en.tokenizers.tgt

    def grams(decoding):
        de_en.decoding = decoding
        ids = tok.encode(de_en.translate([LOOPING]))[0]
        return [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]

    off = grams(dataclasses.replace(beam, no_repeat_ngram_size=0))
    assert len(set(off)) < len(off)
    on = grams(beam)
    assert len(set(on)) == len(on)
    de_en.decoding = DecodingConfig()
