"""Shared pytest fixtures."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same RNG state, whatever ran before it."""
    torch.manual_seed(0)
