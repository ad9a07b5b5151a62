"""Checks shared by the typed config dataclasses (``seq2seq.config``): a value of the wrong
type, a non-finite float or a value outside its ``Literal`` choices is refused naming the
field (``ModelConfig.d_model: ...``); their dict round trip (``to_dict``/``from_dict``); and
the messages that name options by field (``FieldError``, ``FieldWarning``), which each front
end renders in its own words: the CLIs by flag, the server by JSON name."""

from __future__ import annotations

import dataclasses
import math
import string
import types
import typing
from collections.abc import Callable
from functools import cache, partial
from typing import Any, Literal, get_args


class ConfigError(ValueError):
    """A config value or key is invalid; the message names the field (``field``: its name,
    where one field is at fault)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class Named:
    """A message naming options as ``{name}`` in ``template`` (a config field or a
    ``Translator`` argument; other ``{value}`` slots filled from ``values``): its own text
    names the fields, and :meth:`render` names them as a front end calls them."""

    template: str
    values: dict[str, Any]

    def fields(self) -> list[str]:
        return [n for _, n, _, _ in string.Formatter().parse(self.template)
                if n and n not in self.values]

    def render(self, name: Callable[[str], str] = str) -> str:
        """The message with each field called ``name(field)``. Values are filled by
        ``format``, never parsed again: a path with braces in it stays as it is."""
        return self.template.format(**{f: name(f) for f in self.fields()}, **self.values)

    def __reduce__(self):  # pickled (a worker process) by its template, not its text
        return partial(type(self), self.template, **self.values), ()


class FieldError(Named, ConfigError):
    """A bad option value, naming options by field: ``FieldError("{compile}: only for
    {compute_type} float32, not {got}", got=...)``."""

    def __init__(self, template: str, **values: Any):
        self.template, self.values = template, values
        fields = self.fields()
        super().__init__(self.render(), fields[0] if fields else None)


class FieldWarning(Named, UserWarning):
    """A warning naming options by field, as :class:`FieldError`."""

    def __init__(self, template: str, **values: Any):
        self.template, self.values = template, values
        super().__init__(self.render())


def render(message: BaseException | Warning, name: Callable[[str], str]) -> str:
    """``message``'s text with the options it names called ``name(field)`` (a front end's
    one map: flags, JSON names); other messages as they are."""
    return message.render(name) if isinstance(message, Named) else str(message)


def check_fields(obj: Any) -> None:
    """Refuse, naming the field, a value of the wrong type (``"32"`` for an int, from a YAML
    file or an edited checkpoint), a non-finite float, an int beyond 64 bits, or a value
    outside a field's ``Literal[...]`` choices."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        hint, value = hints[f.name], getattr(obj, f.name)
        where = f"{type(obj).__name__}.{f.name}"
        choices = get_args(hint) if typing.get_origin(hint) is Literal else ()
        if choices and value not in choices:
            raise ConfigError(f"{where}: {value!r} is not one of {list(choices)}", f.name)
        if not choices and not _fits(value, hint):
            raise ConfigError(f"{where}: expected {_describe(hint)}, got {value!r}", f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number, got {value!r}", f.name)
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            raise ConfigError(f"{where}={value} is out of range (64-bit integers)", f.name)


@cache
def _hints(cls: type) -> dict[str, Any]:
    # a class's annotations do not change; resolving them costs ~0.3 ms, paid by every
    # config a server request builds
    return typing.get_type_hints(cls)


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the type ``hint`` names (ints pass for floats, bools for neither)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in get_args(hint))
    if origin in (list, tuple):
        # the items too: ``directions=[0]`` must be refused here, not fail later on an int
        items = [a for a in get_args(hint) if a is not Ellipsis] or [Any]
        return isinstance(value, (list, tuple)) and all(
            any(_fits(v, a) for a in items) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a form not checked here


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(h) for h in get_args(hint))
    if origin in (list, tuple) and get_args(hint):
        return f"a list of {_describe(get_args(hint)[0])}"
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))


def positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and value <= 0:
            raise ConfigError(f"{type(obj).__name__}.{name} must be > 0, got {value!r}", name)


def probability(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{type(obj).__name__}.{name} must be in [0, 1), got {value!r}",
                              name)


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain dict (YAML/JSON/``weights_only``-safe)."""
    out = dataclasses.asdict(cfg)
    for key, value in out.items():
        if isinstance(value, tuple):
            out[key] = list(value)
    return out


def from_dict(cls: type, data: dict[str, Any], where: str | None = None) -> Any:
    """Build ``cls`` from a dict, refusing unknown keys by name."""
    where = where or cls.__name__
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    return cls(**data)
