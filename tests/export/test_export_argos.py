"""``seq2seq-export --to argos``: argostranslate installs the package offline and translates
with it exactly as our CTranslate2 export does when called with the arguments Argos passes
(:func:`argos_translate_kwargs`), sentence splitting by the package's spaCy pipeline
included; greedy in float32 it gives ``seq2seq-translate``'s output. argostranslate runs in
a subprocess with its own HOME and XDG folders and no network (connections refused), and
makes no connection attempt while translating. Refusals: the input checkpoint, a FIFO,
files that are not Argos packages, separate tokenizers, multilingual models, no languages."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import (
    multi30k_lines,
    run_main,
    save_multilingual_checkpoint,
    save_tiny_checkpoint,
    tiny_tokenizers,
)

from seq2seq.cli.export import main as export_main
from seq2seq.cli.translate import main as translate_main
from seq2seq.export.argos import argos_translate_kwargs, is_argos_package

if importlib.util.find_spec("argostranslate") is None:  # not imported here: it makes folders in HOME
    pytest.skip("argostranslate is not installed", allow_module_level=True)
ct2 = pytest.importorskip("ctranslate2")
pytest.importorskip("spacy")
import sentencepiece  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[2]
CKPT = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"

# argostranslate in a fresh process: network refused (counted), the package installed under
# the HOME it is given, each text translated; prints {"texts": [...], "attempts": {...}}.
ARGOS = r"""
import json, socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(1)
    raise OSError("network disabled by the test")
socket.socket.connect = socket.getaddrinfo = socket.create_connection = refuse
from argostranslate import package, translate
package.install_from_path(sys.argv[1])
at_import = len(attempts)
texts = json.load(sys.stdin)
t = translate.get_translation_from_codes(sys.argv[2], sys.argv[3])
out = [t.translate(x) for x in texts]
print(json.dumps({"texts": out, "attempts": {"import": at_import, "translate": len(attempts) - at_import}}))
"""


def argos(package: Path, texts: list[str], home: Path, pair=("de", "en"), **settings) -> dict:
    """What argostranslate makes of ``texts`` with ``package`` installed in ``home``."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home),
           "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_CACHE_HOME": str(home / "cache"), "ARGOS_CHUNK_TYPE": "SPACY",
           "ARGOS_INTRA_THREADS": "1", "OMP_NUM_THREADS": "1", **settings}
    done = subprocess.run([sys.executable, "-c", ARGOS, str(package), *pair],
                          input=json.dumps(texts), capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The shipped De->En model as an Argos package and as our CTranslate2 export."""
    from seq2seq.export import export

    tmp = tmp_path_factory.mktemp("argos")
    code, _, err = run_main(export_main, ["-m", str(CKPT), "--to", "argos",
                                          "-o", str(tmp / "de_en.argosmodel")])
    assert code is None or code == 0, err
    ct2_dir = export(CKPT, "ctranslate2", tmp / "ct2")
    return tmp / "de_en.argosmodel", ct2_dir


def texts() -> list[str]:
    lines = multi30k_lines("de", 40, "test_2016_flickr")
    assert not any("_" in line for line in lines)  # Argos decodes "_" as a space; ours does not
    return [*lines, f"{lines[0]} {lines[1]}", ""]


def reference(ct2_dir: Path, items: list[str], compute_type: str, **settings) -> list[str]:
    """Our CTranslate2 export called as Argos calls it: a text's sentences in one batch,
    their best pieces decoded together. Multi30k lines are one sentence each; the
    two-sentence line is the two lines joined by a space."""
    translator = ct2.Translator(str(ct2_dir), device="cpu", compute_type=compute_type,
                                inter_threads=1, intra_threads=1)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(ct2_dir / "source.model"))
    lines = items[:-2]
    sentences = [[line] for line in lines] + [[lines[0], lines[1]], []]
    out = []
    for text in sentences:
        results = translator.translate_batch([sp.encode(s, out_type=str) for s in text],
                                             **argos_translate_kwargs(**settings))
        pieces = [p for r in results for p in r.hypotheses[0]]
        out.append(sp.decode_pieces(pieces).lstrip(" "))
    return out


def test_argos_translates_as_our_ctranslate2_export(exported, tmp_path):
    package, ct2_dir = exported
    items = texts()
    got = argos(package, items, tmp_path / "home")
    assert got["attempts"]["translate"] == 0  # offline: nothing fetched to translate
    assert got["texts"] == reference(ct2_dir, items, "auto")  # Argos' default compute type
    assert got["texts"][-1] == ""


def test_argos_greedy_float32_is_seq2seq_translate(exported, tmp_path):
    """Argos' greedy search is ours without the n-gram rule, wherever ours ends by EOS
    before its length limit and writes no <unk> (Argos: at most 256 tokens, unknowns
    replaced by a source piece)."""
    package, _ = exported
    items = texts()
    got = argos(package, items, tmp_path / "home", ARGOS_BEAM_SIZE="1",
                ARGOS_COMPUTE_TYPE="float32")["texts"]
    code, out, err = run_main(translate_main, ["-m", str(CKPT), "--no-repeat-ngram-size", "0"],
                              "\n".join(items).encode() + b"\n")
    assert code in (None, 0), err
    ours = out.split("\n")[:len(items)]
    sp = sentencepiece.SentencePieceProcessor(
        model_proto=zipfile.ZipFile(package).read("de_en/sentencepiece.model"))
    same_search = [i for i, (text, mine) in enumerate(zip(items, ours))
                   if "⁇" not in mine and len(sp.encode(mine)) + 1
                   < int(1.2 * (len(sp.encode(text)) + 1) + 10)]
    assert len(same_search) >= 38
    assert [got[i] for i in same_search] == [ours[i] for i in same_search]


# ---------------------------------------------------------------- refusals
def export_argos(*argv: str) -> tuple[int, str]:
    code, _, err = run_main(export_main, ["--to", "argos", *argv])
    return code, err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_refusal(code, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("seq2seq-export: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


def test_output_is_the_input_checkpoint(tmp_path):
    ckpt = tmp_path / "model.ckpt"
    ckpt.write_bytes(CKPT.read_bytes())
    before = digest(ckpt)
    for force in ([], ["--force"]):
        one_line_refusal(*export_argos("-m", str(ckpt), "-o", str(ckpt), *force),
                         "input checkpoint")
    assert digest(ckpt) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ckpt"]  # no temporary left


def test_fifo_refused_at_once_and_kept(tmp_path):
    fifo = tmp_path / "out.argosmodel"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "seq2seq.cli.export", "-m", str(CKPT), "--to",
                           "argos", "-o", str(fifo), "--force"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    one_line_refusal(done.returncode, done.stderr, "FIFO")
    assert fifo.is_fifo()


@pytest.mark.parametrize("name", ["...argosmodel", "..argosmodel", "de\nen.argosmodel",
                                  "de\ten.argosmodel", "de\\en.argosmodel"],
                         ids=["dot-dot", "dot", "newline", "tab", "backslash"])
def test_a_name_that_is_no_plain_folder_name_is_refused(name, tmp_path):
    """The package's one folder is named after the file (its name without .argosmodel):
    ``..`` would unpack outside the folder Argos installs into, a newline would be in a
    folder's name."""
    out = tmp_path / name
    one_line_refusal(*export_argos("-m", str(CKPT), "-o", str(out)), "--output", "folder")
    assert list(tmp_path.iterdir()) == []


def test_existing_files_replaced_only_when_argos_packages(exported, tmp_path):
    other = tmp_path / "notes.argosmodel"
    other.write_text("my notes\n")
    a_zip = tmp_path / "other.zip"
    with zipfile.ZipFile(a_zip, "w") as z:
        z.writestr("folder/data.txt", "a zip without metadata.json")
    for target in (other, a_zip):
        before = digest(target)
        for force in ([], ["--force"]):
            one_line_refusal(*export_argos("-m", str(CKPT), "-o", str(target), *force),
                             "not an Argos package")
        assert digest(target) == before
    package = tmp_path / "de_en.argosmodel"
    package.write_bytes(exported[0].read_bytes())
    stale = digest(package)
    one_line_refusal(*export_argos("-m", str(CKPT), "-o", str(package)), "--force")
    assert digest(package) == stale
    code, err = export_argos("-m", str(CKPT), "-o", str(package), "--force")
    assert code in (None, 0), err
    assert is_argos_package(package)
    assert len(list(tmp_path.iterdir())) == 3  # no temporary file left


def test_models_argos_cannot_hold(tmp_path):
    from seq2seq.data.tokenizer import TokenizerPair

    de, en = tiny_tokenizers(100, ("de",)).src, tiny_tokenizers(100, ("en",)).src
    separate = save_tiny_checkpoint(tmp_path / "separate.ckpt", TokenizerPair(de, en))
    multilingual = save_multilingual_checkpoint(tmp_path / "multi.ckpt")
    unnamed = save_tiny_checkpoint(tmp_path / "unnamed.ckpt", tiny_tokenizers(100),
                                   pair=(None, None))
    out = tmp_path / "out.argosmodel"
    one_line_refusal(*export_argos("-m", str(separate), "-o", str(out)),
                     "tokenizers", "sentencepiece.model")
    one_line_refusal(*export_argos("-m", str(multilingual), "-o", str(out)), "multilingual")
    one_line_refusal(*export_argos("-m", str(unnamed), "-o", str(out)), "language codes")
    assert not out.exists()
    joint = save_tiny_checkpoint(tmp_path / "joint.ckpt", tiny_tokenizers(100))
    code, err = export_argos("-m", str(joint), "-o", str(out))  # a joint tokenizer: packaged
    assert code in (None, 0), err
    assert is_argos_package(out)
