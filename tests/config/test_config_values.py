"""Any value in any config field (from YAML, the command line or an edited checkpoint) is
valid or refused with a ``ConfigError`` naming the field: never another exception, never a
NaN (property-based, Hypothesis)."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seq2seq import config as C
from seq2seq.config import ConfigError, DataConfig, ModelConfig, OptimConfig

FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _any_value():
    return st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                     st.lists(st.integers(), max_size=3))


@FUZZ
@given(data=st.data())
@pytest.mark.parametrize("cls", [ModelConfig, C.DecodingConfig, OptimConfig, C.TokenizerConfig, DataConfig,
                                 C.ServeConfig, C.CalibrationConfig])
def test_any_config_value_is_accepted_valid_or_refused_by_name(cls, data):
    """A config (from YAML, the command line or an edited checkpoint) is valid or refused with
    a ``ConfigError`` naming the field: never another exception, never a NaN."""
    field = data.draw(st.sampled_from([f.name for f in dataclasses.fields(cls) if f.name != "tokenizer"]))
    value = data.draw(_any_value())
    try:
        cfg = cls(**{field: value})
    except ConfigError as e:
        assert field in str(e) or cls is ModelConfig and field in ("d_model", "n_heads", "d_k", "d_v"), e
        return
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        assert not (isinstance(v, float) and not math.isfinite(v)), (f.name, v)


@pytest.mark.parametrize("cls", [OptimConfig, DataConfig])
def test_a_list_with_items_of_the_wrong_type_is_refused_by_name(cls):
    """The items of a list-typed field are checked too (``DataConfig(directions=[0])`` once
    raised AttributeError deep in the direction parser)."""
    hints = typing.get_type_hints(cls)
    listed = [f.name for f in dataclasses.fields(cls) if "list[" in str(hints[f.name])
              or "tuple[" in str(hints[f.name])]
    assert listed
    for name in listed:
        for value in ([0], [None], [["a"]], ("x", 1.5)):
            with pytest.raises(ConfigError, match=f"{cls.__name__}.{name}"):
                cls(**{name: value})
