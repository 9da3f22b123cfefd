"""The digest the ``kept_analyses`` guard (tests/conftest.py) takes of an analysis: what each field
holds, pickled canonically and hashed, so that a face handed a kept analysis is caught changing
it. A module of its own (not conftest: another folder's conftest may hold that name on the path)."""

from __future__ import annotations

import copyreg
import dataclasses
import functools
import gc
import hashlib
import io
import itertools
import operator
import pickle

#: What pickle writes as it is, in C: the value and its type, exactly.
_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes})


@functools.cache
def _by_default(cls: type) -> bool:
    """Whether pickle writes an instance of ``cls`` by ``object``'s own reduction: its class, then
    its ``__dict__`` (none for a tuple), and no slot besides it."""
    return (
        cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and cls.__getstate__ is object.__getstate__
        and not copyreg._slotnames(cls)  # type: ignore[attr-defined]
    )


def _plain(cls: type) -> bool:
    """A dataclass written as its class and its ``__dict__`` (the analyses' records)."""
    return dataclasses.is_dataclass(cls) and cls.__dictoffset__ != 0 and _by_default(cls)


@functools.cache
def _uncompared(cls: type) -> frozenset[str]:
    """The fields of a dataclass that its equality leaves out (``field(compare=False)``): a cache
    the object fills as it is read (``critical_path.Graph.memo``), not what it holds."""
    return frozenset(f.name for f in dataclasses.fields(cls) if not f.compare)


def _state(obj: object) -> dict[str, object]:
    """What a dataclass instance (:func:`_plain`) holds: its ``__dict__`` but :func:`_uncompared`."""
    skip = _uncompared(type(obj))
    return {k: v for k, v in vars(obj).items() if k not in skip} if skip else vars(obj)


def _columns(values: list, within: frozenset[type] = frozenset()) -> object:
    """A long list as :func:`_digest` pickles it: the type of each item, then the items of each
    type together, in columns: atoms as they are; lists as their lengths and their items one
    after the other; tuples (named or not) as their length and a column per position; dataclass
    instances (:func:`_plain`) as their ids (which items are one object), their attribute names
    and a column per attribute, each again as a list. Pickle writes a column of atoms at tens of
    ns an item, where it reduces each object (a named tuple through a Python call) in 1-2 us:
    the DDP report's critical path (32,559 nodes, 34,850 edges) 0.17 -> 0.08 CPU s a digest.
    What else the items are (frames, arrays, dicts, other objects, instances of one class but
    not all of the same attributes, a class met again inside its own columns): pickled as they
    are, exactly as before."""
    types = list(map(type, values))
    one = not types or types.count(types[0]) == len(types)
    kinds = types[:1] if one else list(dict.fromkeys(types))
    if _ATOMS.issuperset(kinds):
        return ("atoms", values)
    parts = []
    for kind in kinds:
        of = values
        if len(kinds) > 1:
            of = list(itertools.compress(values, map(operator.is_, types, itertools.repeat(kind))))
        parts.append(_columns_of(kind, of, within))
    return ("kinds", types if len(kinds) > 1 else kinds, parts)


def _columns_of(kind: type, values: list, within: frozenset[type]) -> object:
    """:func:`_columns` of items all of type ``kind`` (``within``: the classes whose columns
    these are, not taken apart again: a cycle is left to pickle's memo)."""
    if kind in _ATOMS:
        return ("atoms", values)
    if kind is list:
        return ("lists", list(map(len, values)), _columns(list(itertools.chain(*values)), within))
    if issubclass(kind, tuple) and kind.__dictoffset__ == 0 and _by_default(kind):
        width, *others = set(map(len, values))
        if not others:
            columns = [_columns(list(c), within) for c in zip(*values, strict=True)]
            return ("tuples", width, columns)
    if _plain(kind) and kind not in within:
        states = list(map(_state, values))
        keys = list(map(tuple, states))
        names = keys[0]
        if keys.count(names) == len(keys):
            ids = list(map(id, values))
            inner = within | {kind}
            columns = [_columns(list(map(operator.itemgetter(n), states)), inner) for n in names]
            return ("objects", ids, names, columns)
    return ("as is", values)


def _canonical(value: object) -> object:
    """A value as :class:`_Canonical` pickles it: a list of 32 items or more as its id (which
    attributes hold one list) and :func:`_columns`."""
    if type(value) is list and len(value) >= 32:
        return ("columns", id(value), _columns(value))
    return ("value", value)


class _Canonical(pickle.Pickler):
    """Pickles a DataFrame or Series as its columns, dtypes and values: reading one may change how
    pandas holds it (its blocks consolidated), never what it says. A dataclass instance as pickle
    does (its class, then its ``__dict__``), each long list in it as :func:`_columns`."""

    def reducer_override(self, obj: object) -> object:
        import pandas as pd

        if isinstance(obj, pd.DataFrame):
            values = tuple(obj[c].to_numpy() for c in obj.columns)
            return tuple, ((tuple(obj.columns), tuple(map(str, obj.dtypes)), obj.index, values),)
        if isinstance(obj, pd.Series):
            return tuple, ((obj.name, str(obj.dtype), obj.index.to_numpy(), obj.to_numpy()),)
        if _plain(type(obj)):
            state = {k: _canonical(v) for k, v in _state(obj).items()}
            return copyreg.__newobj__, (type(obj),), state  # type: ignore[attr-defined]
        return NotImplemented


def _digest_of(value: object) -> bytes:
    """The digest of what ``value`` holds (:class:`_Canonical`); an array's buffer hashed where it
    lies (pickle protocol 5), not copied into the pickle."""
    h = hashlib.sha256()

    def buffer(b: pickle.PickleBuffer) -> None:
        raw = b.raw()
        h.update(raw.nbytes.to_bytes(8, "little"))
        h.update(raw)

    buf = io.BytesIO()
    _Canonical(buf, protocol=5, buffer_callback=buffer).dump(_canonical(value))
    h.update(buf.getbuffer())
    return h.digest()


def _digest(report: object) -> dict[str, bytes]:
    """Each field of a report: the digest of what it holds (:func:`_digest_of`). The garbage
    collector paused meanwhile: the columns are some hundred thousand new containers, and each
    collection they would set off walks the whole heap of the test (the analysis itself too)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        fields = dataclasses.fields(report)  # type: ignore[arg-type]
        return {f.name: _digest_of(getattr(report, f.name)) for f in fields}
    finally:
        if enabled:
            gc.enable()
