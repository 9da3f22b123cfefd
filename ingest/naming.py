"""Default run names: from the folder or file the user gave, else from the trace's content.

Uploads and ``torch.profiler.tensorboard_trace_handler`` give files names that say nothing
(``trace.json.gz``, ``host_1234.1700000000000.pt.trace.json``); a list of runs all called "trace"
is useless. The rule (pure functions, no I/O):

1. The folder's or file's name, without the trace suffixes and the rank part
   (``llama_rank0.pt.trace.json.gz`` -> ``llama``), unless it is generic (``trace``, ``profile``,
   digits, a temp name ...).
2. Else the trace's content: the model (top-level ``model``/``model_name``/``gpuscope.model``/
   ``config``), the host (``hostname``/``host``, or the host of a tensorboard-handler file name
   ``<host>_<pid>.<ms>``) and the date (``baseTimeNanoseconds``, or the handler's ms timestamp),
   joined by spaces: ``resnet50 node7 2026-11-22 20:31:07``.
3. Else the generic name itself (``trace``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any

TRACE_SUFFIXES = (".gz", ".json", ".trace", ".pt")
GENERIC = {
    "",
    "trace",
    "traces",
    "profile",
    "profiles",
    "profiler",
    "kineto",
    "run",
    "rank",
    "worker",
    "tmp",
    "temp",
    "upload",
    "uploads",
    "output",
    "out",
    "log",
    "logs",
    "data",
}
_RANK_PART = re.compile(r"(?i)[_\-. ]*(rank|worker)[_\-. ]*\d+$")
_TMP = re.compile(r"(?i)^(tmp|gpuscope-upload-)[a-z0-9_]+$")
# tensorboard_trace_handler: f"{socket.gethostname()}_{os.getpid()}.{time.time_ns() // 10**6}"
_HANDLER = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.(?P<ms>\d{13})$")
MODEL_KEYS = ("model", "model_name", "gpuscope.model", "config")
HOST_KEYS = ("hostname", "host", "gpuscope.host")


def stem(name: str) -> str:
    """A file or folder name without the trace suffixes (``.pt.trace.json.gz``) and rank part."""
    n = name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    changed = True
    while changed:
        changed = False
        for suffix in TRACE_SUFFIXES:
            if n.lower().endswith(suffix) and len(n) > len(suffix):
                n, changed = n[: -len(suffix)], True
    n = _RANK_PART.sub("", n)
    return n.strip(" _-.")


def is_generic(s: str) -> bool:
    """Whether a stem names nothing: ``trace``, digits, a temp directory, a handler file name."""
    low = s.lower()
    return low in GENERIC or low.isdigit() or bool(_TMP.match(s)) or bool(_HANDLER.match(s))


def _text(v: Any) -> str | None:
    if isinstance(v, str | int | float) and not isinstance(v, bool):
        t = " ".join(str(v).split())
        return t[:60] or None
    return None


def _date(ns: Any) -> str | None:
    try:
        t = dt.datetime.fromtimestamp(int(ns) / 1e9, dt.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    if not 2000 <= t.year <= 2200:
        return None
    return t.strftime("%Y-%m-%d %H:%M:%S")  # to the second: spans of one process differ


def content_name(meta: Mapping[str, Any] | None, source: str | None = None) -> str | None:
    """``model host date`` from a trace's top-level metadata (and a handler-style file name);
    ``None`` when none of them is known."""
    meta = meta or {}
    handler = _HANDLER.match(stem(source)) if source else None
    model = next((t for k in MODEL_KEYS if (t := _text(meta.get(k)))), None)
    host = next((t for k in HOST_KEYS if (t := _text(meta.get(k)))), None)
    if host is None and handler:
        host = handler["host"]
    # The handler's file name holds this span's own start; Kineto's baseTimeNanoseconds is a time
    # base that spans of one process can share, so the file name's time wins when there is one.
    date = _date(int(handler["ms"]) * 10**6) if handler else None
    if date is None:
        date = _date(meta.get("baseTimeNanoseconds"))
    parts = [p for p in (model, host, date) if p]
    return " ".join(parts) if parts else None


def default_run_name(source: str | None, meta: Mapping[str, Any] | None = None) -> str:
    """The name a run gets when the user gives none: ``source`` is the folder or file name as
    the user knows it (``None``: unknown), ``meta`` the trace's top-level metadata (rank 0's)."""
    s = stem(source or "")
    if s and not is_generic(s):
        return s
    return content_name(meta, source) or s or "trace"


def upload_name(file_names: list[str], meta: Mapping[str, Any] | None = None) -> str:
    """The default name of uploaded files that form one run: their common stem (rank parts
    removed), else :func:`default_run_name` of the first one."""
    stems = sorted({stem(n) for n in file_names})
    if len(stems) == 1 and stems[0] and not is_generic(stems[0]):
        return stems[0]
    if len(stems) > 1:
        prefix = _common_prefix(stems)
        if prefix and not is_generic(prefix):
            return prefix
    return default_run_name(file_names[0] if file_names else None, meta)


def _common_prefix(names: list[str]) -> str:
    first, last = min(names), max(names)
    i = 0
    while i < min(len(first), len(last)) and first[i] == last[i]:
        i += 1
    return stem(first[:i])


_META_STR = r'"{key}"\s*:\s*"((?:[^"\\]|\\.){{0,200}})"'
_META_INT = r'"{key}"\s*:\s*(\d{{1,20}})'


def meta_from_head(head: str) -> dict[str, Any]:
    """The naming keys found in the first bytes of a trace's JSON text (before ingest, the
    upload form reads only a file's head): strings for the model/host keys, an int date."""
    out: dict[str, Any] = {}
    for key in (*MODEL_KEYS, *HOST_KEYS):
        m = re.search(_META_STR.format(key=re.escape(key)), head)
        if m:
            try:
                out[key] = json.loads(f'"{m.group(1)}"')
            except ValueError:
                continue
    m = re.search(_META_INT.format(key="baseTimeNanoseconds"), head)
    if m:
        out["baseTimeNanoseconds"] = int(m.group(1))
    return out
