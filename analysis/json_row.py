"""A small frozen record that the JSON output writes as its fields, in their order."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, cast

#: The types whose values :func:`dataclasses.asdict` returns as they are (``copy.deepcopy`` of
#: them is the value itself): a record of only these is its fields' values by name.
_ATOMIC = frozenset({int, float, str, bool, type(None)})
_NAMES: dict[type, tuple[str, ...]] = {}  # a record class's field names, in order


class JsonRow:
    """Base of a frozen dataclass whose JSON (``analyze --json``) is its fields by name, nested
    dataclasses included (:func:`dataclasses.asdict`)."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        """:func:`dataclasses.asdict` of the record: where every field holds a plain number,
        string, bool or None, its fields read directly (a run's 1,000 steps, twice per ingest:
        asdict's copies were ~0.35 CPU s)."""
        cls = type(self)
        names = _NAMES.get(cls)
        if names is None:
            names = _NAMES.setdefault(cls, tuple(f.name for f in fields(cast(Any, self))))
        values = [getattr(self, n) for n in names]
        if all(type(v) in _ATOMIC for v in values):
            return dict(zip(names, values, strict=True))
        return asdict(cast(Any, self))
