"""Build a big Kineto trace by replaying the profiled steps of a real one.

    python benchmarks/make_big_trace.py SRC OUT [--target-gb 1.0]

SRC is a ``*.pt.trace.json[.gz]``. OUT holds SRC's events unchanged (copy 0), then the *replay window*
again and again until OUT reaches ``--target-gb`` (10**9 bytes) of JSON text. The window is every event
from the first ``ProfilerStep#`` on (every event when there is none), less the process/thread metadata,
global instants (``Record Window End``) and the GPU side of launches made before the window.

Copy k is the window's raw text with, and only with, these numbers changed:

* ``ts`` + k × (window span + gap), in whole microseconds, so the decimals stay as written;
* every id + k × stride, one stride for all kinds so that equal ids stay equal (an ac2g flow ``id`` is
  its launch's ``correlation``): ``correlation``, ``External id``, flow ``id`` (ac2g, fwdbwd, ...),
  ``Sequence number``, ``Python id``, ``Python parent id``, ``Ev Idx``; negative values (sentinels)
  are left as they are;
* ``ProfilerStep#N`` -> ``ProfilerStep#(N + k × steps in the window)``.

The text around the numbers is SRC's own (Kineto's layout and indentation), so OUT's bytes per event
are SRC's. The header (deviceProperties, distributedInfo, ...) and the trailer (baseTimeNanoseconds,
traceName, ...) are kept. OUT is written as a stream, one copy at a time (gzip when it ends in .gz),
and ``OUT.meta.json`` records what was made (events, bytes, copies, source hash).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

ID_KEYS = (
    "correlation",
    "External id",
    "id",
    "Sequence number",
    "Python id",
    "Python parent id",
    "Ev Idx",
)
_NUM = re.compile(
    rb'"(ts|'
    + b"|".join(re.escape(k.encode()) for k in ID_KEYS)
    + rb')"(\s*:\s*)(-?\d+)(?=[.,}\s\]])'
    rb"|ProfilerStep#(\d+)"
)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
TS, ID, STEP = 0, 1, 2


class _Args(msgspec.Struct):
    correlation: Any = None


class _Ev(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    s: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: Any = None


class _Trace(msgspec.Struct):
    traceEvents: list[msgspec.Raw]  # Kineto's key


def read_source(path: Path) -> bytes:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        with gzip.open(path, "rb") as g:
            return g.read()
    return path.read_bytes()


def _escape_controls(data: bytes) -> bytes:
    """Raw control characters inside strings (a PyTorch bug) -> \\u00XX, so decoders accept the text."""
    from gpuscope.ingest.json_stream import escape_controls

    return escape_controls(data)


def split_events(src: bytes) -> tuple[bytes, list[bytes], bytes, bytes]:
    """-> (header up to the first event, raw event texts, separator between events, trailer)."""
    try:
        raws = msgspec.json.decode(src, type=_Trace).traceEvents
    except msgspec.DecodeError:
        src = _escape_controls(src)
        raws = msgspec.json.decode(src, type=_Trace).traceEvents
    if len(raws) < 2:
        raise SystemExit("source has fewer than 2 events")
    key = src.find(b'"traceEvents"')
    first = bytes(raws[0])
    start = src.find(first, key)
    second = bytes(raws[1])
    start2 = src.find(second, start + len(first))
    last = bytes(raws[-1])
    end = src.rfind(last) + len(last)
    if min(key, start, start2) < 0 or end < start2:
        raise SystemExit("cannot locate the events array in the source text")
    sep = src[start + len(first) : start2]
    return src[:start], [bytes(r) for r in raws], sep, src[end:]


class Template:
    """The window's text as literals with numeric slots between them (slot i sits after literal i)."""

    def __init__(self, text: bytes) -> None:
        lits: list[bytes] = []
        kinds: list[int] = []
        vals: list[int] = []
        pos = 0
        for m in _NUM.finditer(text):
            if m.group(4) is not None:  # ProfilerStep#N
                a, kind, v = m.start(4), STEP, int(m.group(4))
            else:
                a = m.start(3)
                v = int(m.group(3))
                if m.group(1) == b"ts":
                    kind = TS
                    if v < 0:
                        raise SystemExit("negative timestamps in the replay window: not supported")
                elif v < 0:
                    continue  # sentinel id: leave as written
                else:
                    kind = ID
            lits.append(text[pos:a])
            kinds.append(kind)
            vals.append(v)
            pos = m.end(4) if kind == STEP else m.end(3)
        lits.append(text[pos:])
        self.lits = lits
        self.kinds = np.asarray(kinds, np.int64)
        self.vals = np.asarray(vals, np.int64)
        self.parts: list[bytes] = [b""] * (2 * len(lits) - 1)
        self.parts[0::2] = lits

    def render(self, ts_shift: int, id_shift: int, step_shift: int) -> bytes:
        delta = np.asarray([ts_shift, id_shift, step_shift], np.int64)[self.kinds]
        nums = (self.vals + delta).astype("S20").tolist()
        self.parts[1::2] = nums
        return b"".join(self.parts)


def plan(raws: list[bytes]) -> dict[str, Any]:
    """Which events are replayed, and by how much each copy shifts times, ids and step numbers."""
    dec = msgspec.json.Decoder(_Ev)
    evs = [dec.decode(r) for r in raws]
    steps = [
        (e.ts, e.dur, int(m.group(1)))
        for e in evs
        if e.ph == "X"
        and isinstance(e.name, str)
        and (m := _STEP.match(e.name))
        and isinstance(e.ts, int | float)
        and e.cat in ("user_annotation", "cpu_instant_event", "cpu_op")
    ]
    if not steps:  # any ProfilerStep# event (some torch versions use other categories)
        steps = [
            (e.ts, e.dur, int(m.group(1)))
            for e in evs
            if isinstance(e.name, str)
            and (m := _STEP.match(e.name))
            and isinstance(e.ts, int | float)
        ]
    t0 = min(s[0] for s in steps) if steps else None

    def corr(e: _Ev) -> Any:
        return e.args.get("correlation") if isinstance(e.args, dict) else None

    early = set()  # launches made before the window: their GPU side is not replayed either
    if t0 is not None:
        for e in evs:
            if (
                e.cat in ("cuda_runtime", "cuda_driver")
                and isinstance(e.ts, int | float)
                and e.ts < t0
            ):
                c = corr(e)
                if c is not None:
                    early.add(c)
    window: list[int] = []
    for i, e in enumerate(evs):
        if e.ph == "M" or not isinstance(e.ts, int | float):
            continue
        if e.ph in ("i", "I") and (
            e.s == "g" or e.name == "Record Window End"
        ):  # trace-level instants
            continue
        if t0 is not None and e.ts < t0:
            continue
        if early and (corr(e) in early or (e.cat == "ac2g" and e.id in early)):
            continue
        window.append(i)
    if not window:
        raise SystemExit("nothing to replay: no timed events in the source")
    lo = min(evs[i].ts for i in window)
    hi = max(evs[i].ts + (evs[i].dur if isinstance(evs[i].dur, int | float) else 0) for i in window)
    n_steps = (max(s[2] for s in steps) - min(s[2] for s in steps) + 1) if steps else 0
    if len(steps) >= 2:  # gap between copies = the mean idle time between consecutive steps
        ss = sorted(steps)
        gaps = [b[0] - (a[0] + (a[1] or 0)) for a, b in itertools.pairwise(ss)]
        gap = max(1.0, sum(gaps) / len(gaps))
    else:
        gap = 100.0
    ids = [v for e in evs for v in _ids_of(e) if v >= 0]
    stride = (max(ids) - min(ids) + 1) if ids else 1
    return {
        "window": window,
        "span_us": hi - lo,
        "ts_shift_us": math.ceil(hi - lo + gap),
        "id_stride": stride,
        "step_shift": n_steps,
        "n_steps": len(steps),
        "t0": t0,
    }


def _ids_of(e: _Ev) -> list[int]:
    out = [e.id] if type(e.id) is int else []
    if isinstance(e.args, dict):
        out += [v for k in ID_KEYS if type(v := e.args.get(k)) is int]
    return out


def verify_copy(orig: list[bytes], copy: bytes, sep: bytes, p: dict[str, Any], k: int) -> None:
    """Decode copy k and check ts/ids/step numbers moved by exactly k shifts, everything else equal."""
    got = msgspec.json.decode(b"[" + copy + b"]")
    want = [msgspec.json.decode(r) for r in orig]
    if len(got) != len(want):
        raise SystemExit(f"self-check: copy {k} has {len(got)} events, expected {len(want)}")
    for g, w in zip(got, want, strict=True):
        if (
            isinstance(w.get("ts"), int | float)
            and abs(g["ts"] - w["ts"] - k * p["ts_shift_us"]) > 1e-3
        ):
            raise SystemExit(f"self-check: ts {w['ts']} -> {g['ts']}")
        if type(w.get("id")) is int and w["id"] >= 0 and g["id"] != w["id"] + k * p["id_stride"]:
            raise SystemExit(f"self-check: id {w['id']} -> {g['id']}")
        wa, ga = w.get("args") or {}, g.get("args") or {}
        for key in ID_KEYS:
            if (
                type(wa.get(key)) is int
                and wa[key] >= 0
                and ga[key] != wa[key] + k * p["id_stride"]
            ):
                raise SystemExit(f"self-check: {key} {wa[key]} -> {ga[key]}")
        if g.keys() != w.keys() or ga.keys() != wa.keys():
            raise SystemExit("self-check: keys changed")


def make_big_trace(
    src_path: Path,
    out: Path,
    target_bytes: int,
    *,
    meta_path: Path | None = None,
    log: IO[str] = sys.stderr,
) -> dict[str, Any]:
    t_start = time.perf_counter()
    src = read_source(src_path)
    header, raws, sep, trailer = split_events(src)
    p = plan(raws)
    window_raws = [raws[i] for i in p["window"]]
    tpl = Template(sep.join(window_raws))
    copy1 = tpl.render(p["ts_shift_us"], p["id_stride"], p["step_shift"])
    verify_copy(window_raws, copy1, sep, p, 1)
    print(
        f"source: {src_path} ({len(src) / 1e6:.1f} MB JSON, {len(raws)} events, {p['n_steps']} profiler "
        f"steps); replaying {len(window_raws)} events ({len(copy1) / 1e6:.1f} MB) per copy, "
        f"+{p['ts_shift_us']} us, id stride {p['id_stride']}",
        file=log,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    body0 = sep.join(raws)
    written = len(header) + len(body0)
    n_events = len(raws)
    copies = 1
    gz = out.name.endswith(".gz")
    with gzip.open(tmp, "wb", compresslevel=6) if gz else open(tmp, "wb") as f:
        f.write(header)
        f.write(body0)
        k = 1
        while written + len(trailer) < target_bytes:
            text = (
                copy1
                if k == 1
                else tpl.render(k * p["ts_shift_us"], k * p["id_stride"], k * p["step_shift"])
            )
            f.write(sep)
            f.write(text)
            written += len(sep) + len(text)
            n_events += len(window_raws)
            copies += 1
            k += 1
            if k % 20 == 0:
                print(f"  {written / 1e9:.2f} GB", file=log, end="\r")
        f.write(trailer)
        written += len(trailer)
    if k > 20:
        print(file=log)
    tmp.replace(out)
    meta = {
        "path": str(out),
        "json_bytes": written,
        "file_bytes": out.stat().st_size,
        "n_events": n_events,
        "copies": copies,
        "window_events": len(window_raws),
        "source": str(src_path),
        "source_sha256": hashlib.sha256(src).hexdigest(),
        "source_json_bytes": len(src),
        "source_events": len(raws),
        "target_bytes": target_bytes,
        "ts_shift_us": p["ts_shift_us"],
        "id_stride": p["id_stride"],
        "step_shift": p["step_shift"],
        "seconds": round(time.perf_counter() - t_start, 2),
    }
    (meta_path or Path(str(out) + ".meta.json")).write_text(json.dumps(meta, indent=1) + "\n")
    print(
        f"wrote {out}: {written / 1e9:.3f} GB JSON, {n_events} events, {copies} copies, "
        f"{meta['seconds']} s",
        file=log,
    )
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument(
        "--target-gb", type=float, default=1.0, help="JSON size to reach, 10**9 bytes (default 1.0)"
    )
    a = ap.parse_args(argv)
    make_big_trace(a.src, a.out, int(a.target_gb * 1e9))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
