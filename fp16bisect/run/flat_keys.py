"""Flat keys (a manifest entry's, ``SearchOptions.of``'s, a script's) routed to the option records that own them.

Every field of a record is a key by its name, and so is each of the tolerance's values; ``split`` makes the records
from such keys, ``keys_of`` says which record holds which key (the manifests' and the API's documentation of them).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from fp16bisect import records
from fp16bisect.errors import UsageError
from fp16bisect.tolerance import GivenTolerance, Tolerance

__all__ = ["TOLERANCE_KEYS", "keys_of", "split"]


def keys_of(parts: dict[str, type[records.Record]], command: str | None = None) -> dict[str, str]:
    """The flat keys of the tolerance's values and of the records ``parts`` (those ``command`` takes; None:
    all), each -> the part that holds it."""
    found = {k: "tolerance" for k in TOLERANCE_KEYS}
    for name, record in parts.items():
        found.update({f.name: name for f in fields(record) if command is None or command in records.commands_of(f)})
    return found


TOLERANCE_KEYS = tuple(f.name for f in fields(GivenTolerance) if f.name != "per_output")  # accept: the API's alone


def split(flat: dict, parts: dict[str, type[records.Record]], own: tuple[str, ...], *, search: bool) -> dict:
    """Flat keys routed to the records that own them: the tolerance's, each record's fields, and ``own`` (the
    composite's own fields); an unknown key is a ``UsageError`` listing the known ones."""
    where = keys_of(parts)
    unknown = sorted(records.shown(k) for k in set(flat) - set(where) - set(own))
    if unknown:
        raise UsageError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted({*where, *own}))}")
    made: dict[str, Any] = {name: {} for name in ("tolerance", *parts)}
    for key, value in flat.items():
        if key in where:
            made[where[key]][key] = value
    for name, record in parts.items():
        made[name] = record(**made[name])
    made.update({k: flat[k] for k in own if k in flat})
    given = GivenTolerance(**made["tolerance"])
    made["tolerance"] = given.over(Tolerance()) if search else given
    return made
