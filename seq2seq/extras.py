"""How to install an optional part of seq2seq: the one wording of every "pip install" hint.

The distribution is ``seq2seq-mt`` (the name ``seq2seq`` on PyPI is another project) and it
is not published: it is installed from a checkout, so a hint names that checkout,
``pip install -e "/path/to/checkout[hf]"``, or, for a copy installed without one beside
it, ``pip install -e ".[hf]"`` run in the checkout. Only standard-library imports: the
hints are given where an import failed.
"""

from __future__ import annotations

from pathlib import Path

DISTRIBUTION = "seq2seq-mt"
# The optional-dependency groups of pyproject.toml that code asks for (a test checks each
# is there): what each one makes work.
EXTRAS = {
    "hf": "seq2seq-export --to hf, seq2seq-import",
    "ctranslate2": "seq2seq-export --to ctranslate2",
    "argos": "seq2seq-export --to argos",
    "serve": "seq2seq-serve",
    "documents": "seq2seq-translate --input FILE.docx / .srt / .odt / .odp / .pptx / .epub",
}
CHECKOUT = Path(__file__).resolve().parent.parent


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` into this environment."""
    if extra not in EXTRAS:
        raise ValueError(f"no extra {extra!r}: one of {list(EXTRAS)}")
    if (CHECKOUT / "pyproject.toml").is_file():  # a checkout, installed editable or not
        return f'pip install -e "{CHECKOUT}[{extra}]"'
    return f'pip install -e ".[{extra}]" (in a checkout of {DISTRIBUTION})'
