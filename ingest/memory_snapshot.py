"""Read a ``torch.cuda.memory._dump_snapshot`` pickle WITHOUT running code from it.

A pickle is a program: the standard loader imports and calls whatever the file names (``os.system``
included). :class:`PlainUnpickler` refuses every import (``find_class``) and every persistent id,
so only the pickle's own containers and scalars can come out: dicts, lists, tuples, sets, strings,
bytes, ints, floats, bools and None. A real snapshot is exactly that. Anything else is refused with
one line naming the file and what it asked for; nothing of the file runs.

:func:`snapshot_summary` turns the snapshot into the few figures gpuscope keeps (in the rank's
metadata, key ``gpuscope.memory_snapshot``; docs/metrics.md, "Memory snapshot").
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from gpuscope.ingest.errors import IngestError

MAX_SNAPSHOT_BYTES = 1 << 30  # a snapshot larger than 1 GiB is refused (read whole into memory)
META_KEY = "gpuscope.memory_snapshot"
SNAPSHOT_SUFFIXES = (".pickle", ".pkl")


class RefusedPickle(pickle.UnpicklingError):
    """The pickle asked for something other than plain containers and scalars."""


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds only the pickle's own containers and scalars: every global (class,
    function) and every persistent id is refused, so REDUCE/BUILD/INST/OBJ have nothing to call."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(f"it asks for {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("it asks for a persistent object")


def load_plain(data: bytes) -> Any:
    """Unpickle ``data`` admitting containers and scalars only; raises RefusedPickle otherwise
    (and pickle.UnpicklingError / EOFError / ValueError for a damaged file)."""
    return PlainUnpickler(io.BytesIO(data)).load()


def read_snapshot(path: Path | str, data: bytes | None = None) -> dict[str, Any]:
    """The summary of a memory snapshot file (``data``: its bytes, when already read, e.g. an
    upload). Raises IngestError, one line naming the file, for anything that is not a plain
    snapshot."""
    p = Path(path)
    if data is None:
        try:
            size = p.stat().st_size
        except OSError as e:
            raise IngestError(p, f"cannot read the memory snapshot: {e.strerror or e}") from None
        if size > MAX_SNAPSHOT_BYTES:
            raise IngestError(
                p, f"memory snapshot of {size} bytes: more than the 1 GiB gpuscope reads"
            )
        data = p.read_bytes()
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise IngestError(p, "memory snapshot larger than the 1 GiB gpuscope reads")
    try:
        obj = load_plain(data)
    except RefusedPickle as e:
        raise IngestError(
            p,
            f"refused: not a plain memory snapshot ({e}); only containers, numbers and strings are read",
        ) from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        MemoryError,
    ) as e:
        raise IngestError(
            p, f"not a memory snapshot pickle: {type(e).__name__}: {str(e)[:80]}"
        ) from None
    return snapshot_summary(p, obj)


def snapshot_summary(path: Path | str, snap: Any) -> dict[str, Any]:
    """Segments, reserved / allocated / active bytes, the largest free block and how the allocator's
    recorded actions split, per device (``torch.cuda.memory._snapshot()``'s layout: ``segments``, each
    with ``device``, ``total_size``, ``allocated_size``, ``active_size``, ``blocks`` of ``size`` and
    ``state``; ``device_traces``, one list of actions per device)."""
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise IngestError(
            path, "not a memory snapshot: no 'segments' list (torch.cuda.memory._dump_snapshot)"
        )
    devices: dict[int, dict[str, Any]] = {}
    for seg in snap["segments"]:
        if not isinstance(seg, dict):
            continue
        d = devices.setdefault(_n(seg.get("device")), {
            "segments": 0, "reserved_bytes": 0, "allocated_bytes": 0, "active_bytes": 0,
            "largest_free_block_bytes": 0, "free_blocks": 0,
        })  # fmt: skip
        d["segments"] += 1
        d["reserved_bytes"] += _n(seg.get("total_size"))
        d["allocated_bytes"] += _n(seg.get("allocated_size"))
        d["active_bytes"] += _n(seg.get("active_size"))
        for blk in seg.get("blocks") or []:
            if isinstance(blk, dict) and blk.get("state") == "inactive":
                d["free_blocks"] += 1
                d["largest_free_block_bytes"] = max(
                    d["largest_free_block_bytes"], _n(blk.get("size"))
                )
    actions: dict[str, int] = {}
    traces = snap.get("device_traces")
    for tr in traces if isinstance(traces, list) else []:
        for a in tr if isinstance(tr, list) else []:
            if isinstance(a, dict) and isinstance(a.get("action"), str):
                actions[a["action"]] = actions.get(a["action"], 0) + 1
    return {
        "file": Path(path).name,
        "devices": {str(k): v for k, v in sorted(devices.items())},
        "actions": dict(sorted(actions.items())),
    }


def _n(v: Any) -> int:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0
