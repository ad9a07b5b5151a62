"""The training tests' corpus: Multi30k de-en as text files, plus files and configs that are bad."""

import pytest
from helpers import write_train_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """600 training and 40 validation pairs of Multi30k de-en as text, plus bad files."""
    return write_train_corpus(tmp_path_factory.mktemp("train_corpus"))
