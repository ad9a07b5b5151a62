"""Which cross-attention rule carries an HTML tag to the right word: one German noun or
colour word per test sentence is put in <b>, the page translated with each rule, and the
bold text compared with the word's English translation (a small dictionary), counted only
where the translation holds that English word.

    python scripts/experiments/tag_alignment.py -m data/models/multi30k_de_en_tiny.ckpt
"""

from __future__ import annotations

import argparse
import re

from seq2seq import Translator
from seq2seq.documents import Aligned, translate_html
from seq2seq.documents.align import piece_spans
from seq2seq.shipped import multi30k_lines

WORDS = {"Hund": "dog", "Mann": "man", "Frau": "woman", "Mädchen": "girl", "Junge": "boy",
         "Kind": "child", "Gras": "grass", "Straße": "street", "Wasser": "water", "Ball": "ball",
         "Hemd": "shirt", "Hut": "hat", "Schnee": "snow", "Männer": "men", "Frauen": "women",
         "Kinder": "children", "Gruppe": "group", "roten": "red", "blauen": "blue",
         "schwarzen": "black", "weißen": "white", "Strand": "beach", "Gitarre": "guitar",
         "Hunde": "dogs", "Leute": "people", "Menschen": "people"}
TEST = "test_2016_flickr.de.gz"
RULES = {"last layer": lambda w: w[-1:], "penultimate layer": lambda w: w[-2:-1],
         "mean of all layers": lambda w: w}


def aligned(result, rule) -> Aligned:
    import torch

    layers = rule(result.attention.decoder_cross)  # per layer (1, H, L, S)
    weights = torch.stack([w[0].float().mean(0) for w in layers]).mean(0)  # (L, S)
    src, tgt = piece_spans(result.src, result.src_pieces), piece_spans(result.hyp, result.tgt_pieces)
    cols = [j for j, s in enumerate(src) if s is not None]
    return Aligned(result.hyp, [(*span, *src[cols[int(weights[i, cols].argmax())]])
                                for i, span in enumerate(tgt[:weights.shape[0]]) if span])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", dest="checkpoint", default="data/models/multi30k_de_en_tiny.ckpt")
    ap.add_argument("--sentences", type=int, default=400, help="test sentences with a dictionary word")
    args = ap.parse_args()
    lines = multi30k_lines(TEST)
    cases = [(s, k) for s in lines for k in [next((i for i, w in enumerate(s.split()) if w in WORDS), None)]
             if k is not None][:args.sentences]
    translator = Translator.from_checkpoint(args.checkpoint)
    results = {r.src: r for r in translator.translate_full([s for s, _ in cases], True)}
    whole = lambda text: [(0, len(text))]  # noqa: E731 -- each test line is one sentence
    for name, rule in RULES.items():
        n = exact = holds = 0
        for s, k in cases:
            words, english = s.split(), WORDS[s.split()[k]]
            if not re.search(rf"\b{english}\b", results[s].hyp):
                continue
            page = "<p>" + " ".join(f"<b>{w}</b>" if i == k else w for i, w in enumerate(words)) + "</p>"
            out = translate_html(page, lambda ss, r=rule: [aligned(results[x], r) for x in ss], whole)
            bold = re.search(r"<b>([^<]*)</b>", out).group(1)
            n, exact = n + 1, exact + (bold.strip(" ,.") == english)
            holds += bool(re.search(rf"\b{english}\b", bold))
        print(f"{name}: {n} tags; the bold text is exactly the English word {exact}, holds it {holds}")


if __name__ == "__main__":
    main()
