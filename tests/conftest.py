"""Shared pytest fixtures."""

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase

# Tests use tiny models: one thread avoids oversubscribing small CPUs (and the
# subprocesses some tests start), and the corpora are local.
torch.set_num_threads(1)
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Property tests. "repeatable" (the default, so the README's test command and CI): every run
# draws the same examples (a fixed seed per test), after replaying the examples that
# exploration found and saved in tests/hypothesis-found/ (regression cases, kept in git).
# "explore" (`--hypothesis-profile explore`): fresh randomness, and whatever fails is saved
# there for the repeatable runs to replay.
FOUND = DirectoryBasedExampleDatabase(Path(__file__).parent / "hypothesis-found")
settings.register_profile("repeatable", database=ReadOnlyDatabase(FOUND), deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", database=FOUND, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("repeatable")  # also under CI=true, which would load Hypothesis' "ci"

HYPOTHESIS_SEED = 0


def pytest_collection_modifyitems(items):
    """Under "repeatable", give each property test a fixed seed. Hypothesis' public ways
    (``derandomize``, ``@seed``, ``--hypothesis-seed``) all switch the saved examples off, so
    this sets the attribute that ``@seed`` sets, without its ``database=None``."""
    if settings._current_profile != "repeatable":
        return
    for item in items:
        test = getattr(item, "obj", None)
        if getattr(test, "is_hypothesis_test", False):
            test._hypothesis_internal_use_seed = HYPOTHESIS_SEED


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same RNG state, whatever ran before it."""
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def compiled_cache(tmp_path_factory) -> Path:
    """One cache of compiled packages per test module: each package is made once there."""
    return tmp_path_factory.mktemp("compiled-cache")


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a whole module, restored afterwards: the command-line entry
    points a test calls in-process set the thread count for the machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    """A folder the command-line tests read and never change: tiny checkpoints (good.ckpt;
    good2.ckpt, another seed; en_de.ckpt, the other direction) and a two-line De->En test
    set (src.de, ref.en)."""
    from helpers import save_tiny_checkpoint, tiny_tokenizers

    d = tmp_path_factory.mktemp("work")
    tokenizers = tiny_tokenizers()
    save_tiny_checkpoint(d / "good.ckpt", tokenizers)
    save_tiny_checkpoint(d / "good2.ckpt", tokenizers, seed=1)
    save_tiny_checkpoint(d / "en_de.ckpt", tokenizers, seed=1, pair=("en", "de"))
    (d / "src.de").write_text("Ein Hund.\nZwei Männer.\n", encoding="utf-8")
    (d / "ref.en").write_text("A dog.\nTwo men.\n", encoding="utf-8")
    return d


@pytest.fixture(scope="session")
def other_tokenizers():
    """Another tokenizer of the same size as ``work``'s: a checkpoint relabelled with it must
    be refused."""
    from helpers import tiny_tokenizers

    return tiny_tokenizers(langs=("en",), n=300)
