"""A small frozen record that the JSON output writes as its fields, in their order."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, cast


class JsonRow:
    """Base of a frozen dataclass whose JSON (``analyze --json``) is its fields by name, nested
    dataclasses included (:func:`dataclasses.asdict`)."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(cast(Any, self))
