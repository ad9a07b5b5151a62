"""Shared pytest fixtures."""

import os

import pytest
import torch

# Tests use tiny models: one thread avoids oversubscribing small CPUs (and the
# subprocesses some tests start), and the corpora are local.
torch.set_num_threads(1)
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same RNG state, whatever ran before it."""
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a whole module, restored afterwards: the command-line entry
    points a test calls in-process set the thread count for the machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
