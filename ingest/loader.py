"""Ingest runs: files and folders -> one transaction per call, content-derived run ids."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gpuscope.ingest.errors import DuplicateRunError, IngestError
from gpuscope.ingest.json_stream import TraceSplitter, parse_partial_object
from gpuscope.ingest.kineto import IdMap, decode_batch, metadata_labels, to_arrow
from gpuscope.ingest.source import file_sha256, iter_json_bytes
from gpuscope.ingest.store import run_exists, transaction

TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[_\-.]?(\d+)(?:[^0-9]|$)", re.IGNORECASE)
ABSOLUTE_NS = 10**17  # timestamps beyond this (1973 in Unix ns) are absolute already

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass
class RunResult:
    """What one ingested (or already present) run looks like, JSON-ready."""

    run_id: str
    name: str
    kind: str
    n_ranks: int
    n_events: int
    paths: list[str]
    duplicate: bool = False
    gpu_name: str | None = None
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def rank_from_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def is_trace_file(path: Path) -> bool:
    n = path.name.lower()
    return path.is_file() and n.endswith(TRACE_SUFFIXES) and not n.startswith(".")


def run_id_for(shas: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(shas)).encode()).hexdigest()[:12]


def display_name(path: Path) -> str:
    n = path.name
    for suffix in (".gz", ".json", ".trace", ".pt"):
        if n.lower().endswith(suffix):
            n = n[: -len(suffix)]
    return n or path.name


def _rank_of(meta: dict[str, Any]) -> int | None:
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    return None


class TraceRunWriter:
    """Writes the rank files of one trace run inside the caller's transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection, run_id: str, files: list[Path],
                 progress: Progress | None = None) -> None:
        self.con, self.run_id, self.files = con, run_id, files
        self.names = IdMap()
        self.labels = IdMap(start=-1, step=-1)  # non-numeric pids/tids get negative ids
        self.progress = progress
        self.total_bytes = sum(p.stat().st_size for p in files)
        self.done_bytes = 0

    def write_rank(self, path: Path, sha: str, rank_hint: int | None) -> dict[str, Any]:
        label_rows: dict[tuple[str, int], str] = {}
        meta_labels: list[tuple[str, Any, str]] = []
        splitter = TraceSplitter(path, iter_json_bytes(path))
        rank: int | None = None
        n_events = 0
        ts_min: int | None = None
        ts_max: int | None = None
        file_bytes = path.stat().st_size
        for batch in splitter.batches():
            if rank is None:
                rank = _rank_of(splitter.prefix_meta)
                rank = rank if rank is not None else rank_hint
                if rank is None:
                    raise IngestError(path, "cannot tell its rank: no distributedInfo.rank and no rank in the file name")
                self._check_rank_free(path, rank)
            events = decode_batch(path, batch)
            table = to_arrow(events, self.run_id, rank, self.names, self.labels, label_rows)
            meta_labels += metadata_labels(events)
            n_events += table.num_rows
            lo, hi = _extent(table)
            ts_min = lo if ts_min is None else (ts_min if lo is None else min(ts_min, lo))
            ts_max = hi if ts_max is None else (ts_max if hi is None else max(ts_max, hi))
            self.con.register("_gpuscope_batch", table)
            self.con.execute("INSERT INTO events SELECT * FROM _gpuscope_batch")
            self.con.unregister("_gpuscope_batch")
            if self.progress:
                self.progress(self.done_bytes + min(file_bytes, batch.offset), self.total_bytes)
        if n_events == 0:
            raise IngestError(path, "the trace has no events")
        meta = splitter.metadata
        assert rank is not None
        final_rank = _rank_of(meta)
        if final_rank is not None and final_rank != rank:  # distributedInfo came after the events
            self._check_rank_free(path, final_rank)
            self.con.execute("UPDATE events SET rank = ? WHERE run_id = ? AND rank = ?",
                             [final_rank, self.run_id, rank])
            rank = final_rank
        base = meta.get("baseTimeNanoseconds")
        base_ns = int(base) if isinstance(base, int | float) and not isinstance(base, bool) else None
        offset = 0 if (ts_min is not None and ts_min > ABSOLUTE_NS) or base_ns is None else base_ns
        info = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None
        rest = {k: v for k, v in meta.items() if k not in ("deviceProperties", "distributedInfo")}
        self.con.execute(
            "INSERT INTO ranks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [self.run_id, rank, str(path), file_bytes, splitter.json_bytes, sha, base_ns, offset,
             (info or {}).get("world_size"), (info or {}).get("backend"),
             _json_or_none(meta.get("deviceProperties")), _json_or_none(info), json.dumps(rest),
             n_events, ts_min, ts_max],
        )
        rows = [(self.run_id, rank, k, i, v) for (k, i), v in label_rows.items()]
        for kind, ident, label in meta_labels:
            if isinstance(ident, int):
                rows.append((self.run_id, rank, kind, ident, label))
            elif ident is not None:
                try:
                    rows.append((self.run_id, rank, kind, int(ident), label))
                except ValueError:
                    rows.append((self.run_id, rank, kind, self.labels.get(str(ident)), label))
        if rows:
            self.con.executemany("INSERT INTO threads VALUES (?, ?, ?, ?, ?)", rows)
        self.done_bytes += file_bytes
        return {"rank": rank, "n_events": n_events, "meta": meta, "offset": offset,
                "ts_min": ts_min, "ts_max": ts_max}

    def _check_rank_free(self, path: Path, rank: int) -> None:
        row = self.con.execute(
            "SELECT path FROM ranks WHERE run_id = ? AND rank = ?", [self.run_id, rank]
        ).fetchone()
        taken = row[0] if row else None
        if taken is None and rank in getattr(self, "_open_ranks", {}):
            taken = self._open_ranks[rank]
        if taken is not None and taken != str(path):
            raise IngestError(path, f"rank {rank} is also the rank of {taken}; one file per rank")
        self._open_ranks = {**getattr(self, "_open_ranks", {}), rank: str(path)}

    def write_names(self) -> None:
        if self.names.ids:
            t = pa.table({
                "run_id": pa.array([self.run_id] * len(self.names.ids), pa.string()),
                "name_id": pa.array(list(self.names.ids.values()), pa.int32()),
                "name": pa.array(list(self.names.ids.keys()), pa.string()),
            })
            self.con.register("_gpuscope_names", t)
            self.con.execute("INSERT INTO names SELECT * FROM _gpuscope_names")
            self.con.unregister("_gpuscope_names")


def _extent(table: pa.Table) -> tuple[int | None, int | None]:
    import pyarrow.compute as pc

    ts = table.column("ts_ns")
    end = pc.add(ts, pc.fill_null(table.column("dur_ns"), 0))
    lo = pc.min(ts).as_py()
    hi = pc.max(end).as_py()
    return lo, hi


def _json_or_none(v: Any) -> str | None:
    return None if v is None else json.dumps(v)


def collect_trace_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if is_trace_file(p))
        if not files:
            raise IngestError(path, "folder holds no trace files (*.json, *.json.gz)")
        return files
    if not path.exists():
        raise IngestError(path, "no such file or folder")
    if not path.is_file():
        raise IngestError(path, "not a regular file")
    return [path]


def _rank_hints(files: list[Path]) -> list[int | None]:
    if len(files) == 1:
        r = rank_from_name(files[0])
        return [r if r is not None else 0]
    hints = [rank_from_name(p) for p in files]
    return hints


def ingest_trace(con: duckdb.DuckDBPyConnection, path: Path, *, name: str | None = None,
                 tags: Iterable[str] = (), progress: Progress | None = None) -> RunResult:
    """Ingest one run (a file, or a folder of rank files) inside the caller's transaction."""
    files = collect_trace_files(path)
    shas = {p: file_sha256(p) for p in files}
    run_id = run_id_for(shas.values())
    if run_exists(con, run_id):
        raise DuplicateRunError(path, run_id)
    writer = TraceRunWriter(con, run_id, files, progress)
    hints = _rank_hints(files)
    ranks = [writer.write_rank(p, shas[p], h) for p, h in zip(files, hints, strict=True)]
    writer.write_names()
    rank0 = min(ranks, key=lambda r: r["rank"])
    props = rank0["meta"].get("deviceProperties")
    gpu = props[0].get("name") if isinstance(props, list) and props and isinstance(props[0], dict) else None
    torch_version = _torch_version(rank0["meta"])
    starts = [r["ts_min"] + r["offset"] for r in ranks if r["ts_min"] is not None]
    ends = [r["ts_max"] + r["offset"] for r in ranks if r["ts_max"] is not None]
    n_events = sum(r["n_events"] for r in ranks)
    run_name = name or display_name(path)
    con.execute(
        "INSERT INTO runs VALUES (?, ?, 'trace', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [run_id, run_name, dt.datetime.now(dt.UTC).replace(tzinfo=None), len(files), n_events,
         sum(p.stat().st_size for p in files), gpu, torch_version, sorted(set(tags)),
         min(starts) if starts else None, max(ends) if ends else None],
    )
    return RunResult(run_id, run_name, "trace", len(files), n_events, [str(p) for p in files], gpu_name=gpu)


def _torch_version(meta: dict[str, Any]) -> str | None:
    for key in ("torch_version", "pytorch_version", "gpuscope.torch_version"):
        v = meta.get(key)
        if isinstance(v, str):
            return v
    return None


def ingest_paths(con: duckdb.DuckDBPyConnection, paths: Iterable[str | Path], *,
                 name: str | None = None, tags: Iterable[str] = (),
                 progress: Progress | None = None) -> list[RunResult]:
    """Ingest each path as one run, all in one transaction: on any error nothing is written.

    A path already ingested (same content) is reported with ``duplicate=True`` and not written again.
    """
    paths = [Path(p) for p in paths]
    results: list[RunResult] = []
    with transaction(con):
        for p in paths:
            try:
                results.append(ingest_trace(con, p, name=name if len(paths) == 1 else None,
                                            tags=tags, progress=progress))
            except DuplicateRunError as e:
                row = con.execute("SELECT name, kind, n_ranks, n_events, gpu_name FROM runs WHERE run_id = ?",
                                  [e.run_id]).fetchone()
                assert row is not None
                results.append(RunResult(e.run_id, row[0], row[1], row[2], row[3], [str(p)],
                                         duplicate=True, gpu_name=row[4]))
    return results
