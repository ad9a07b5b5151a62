"""LibreTranslate's parameters, read as LibreTranslate reads them: a JSON object body, or else
form fields (url-encoded or multipart) over query-string parameters (on a POST too); each
malformed one a 400 in its words (:func:`~seq2seq.serving.libre.bad`)."""

from __future__ import annotations

import json

from fastapi import Request
from starlette.datastructures import FormData

from seq2seq.serving.libre import FORMS, bad


async def form_fields(request: Request) -> tuple[dict, FormData | None]:
    """Form fields over query-string parameters (a form value wins), and the form (``None``
    for a body that is not a form)."""
    values: dict = dict(request.query_params)
    mime = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if mime not in FORMS:
        return values, None
    form = await request.form()
    values.update({k: v for k, v in form.items() if isinstance(v, str)})
    return values, form


async def params(request: Request) -> dict:
    """The request's parameters: a JSON object body over query-string parameters, or else
    :func:`form_fields`. A form's ``q`` given more than once is a list of texts, as a JSON
    ``q`` list is; its line endings become ``\\n`` (so that the character limit counts what
    the model gets)."""
    mime = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if mime == "application/json" or mime.endswith("+json"):
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError):  # RecursionError: nested past Python's limit
            raise bad("the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise bad("the JSON body must be an object of parameters")
        return {**request.query_params, **body}
    values, form = await form_fields(request)
    qs = request.query_params.getlist("q")
    if form is not None:
        qs = [q for q in form.getlist("q") if isinstance(q, str)] or qs
    qs = [q.replace("\r\n", "\n").replace("\r", "\n") for q in qs]
    if qs:
        values["q"] = qs if len(qs) > 1 else qs[0]
    return values


def text(value, name: str) -> str:
    """``value`` if it is a string of valid Unicode, else a 400 naming the parameter."""
    if not isinstance(value, str):
        raise bad(f"{name} must be a string")
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise bad(f"{name} contains a lone UTF-16 surrogate (not valid Unicode)")
    return value


def texts(q) -> list[str]:
    """``q``'s texts: a list of strings, or one string."""
    return [text(t, "q") for t in q] if isinstance(q, list) else [text(q, "q")]


def count(value, name: str, limit: int) -> int:
    """A whole number in [0, limit] (LibreTranslate: a negative one counts as 0)."""
    try:
        n = max(0, int(value))
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity, 1e999999
        raise bad(f"{name} parameter is not a number") from None
    if n > limit:
        raise bad(f"{name} parameter must be <= {limit}")
    return n


def required(p: dict, *names: str) -> None:
    """A 400 for the first of ``names`` missing from ``p`` (or empty)."""
    for name in names:
        if not p.get(name):
            raise bad(f"missing {name} parameter")
