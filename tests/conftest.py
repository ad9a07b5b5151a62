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
