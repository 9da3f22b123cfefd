"""Ingest runs: files and folders -> rows of the store, each call published in one transaction."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuscope.ingest import job as J
from gpuscope.ingest.batch_insert import BatchInserter
from gpuscope.ingest.errors import DuplicateRunError, IngestError
from gpuscope.ingest.naming import default_run_name
from gpuscope.ingest.nvml import ingest_series, is_nvml_file
from gpuscope.ingest.parse_pool import ParsePool, default_jobs, file_shas
from gpuscope.ingest.rank_rows import MAX_KEPT_EVENTS, RankRows, RankSink, RankSinks
from gpuscope.ingest.records import RankSummary, RunResult, RunRow, run_id_for
from gpuscope.ingest.source import iter_json_bytes
from gpuscope.store import Connection, Store, run_exists, transaction, usable_cores

TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[_\-.]?(\d+)(?:[^0-9]|$)", re.IGNORECASE)
ABSOLUTE_NS = 10**17  # timestamps beyond this (1973 in Unix ns) are absolute already
INGEST_MEMORY_LIMIT = "160MB"  # DuckDB's memory during an ingest (it spills beyond); restored after

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
# (con, the trace run just written), in its transaction; it may return what is to run once the
# transaction has committed (an AfterCommit: it is called with con), or None
AfterTrace = Callable[[Any, RunResult], Any]
AfterCommit = Callable[[Any], Any]


__all__ = ["RunResult", "ingest_paths", "ingest_trace", "run_id_for"]


def rank_from_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def is_trace_file(path: Path) -> bool:
    n = path.name.lower()
    return path.is_file() and n.endswith(TRACE_SUFFIXES) and not n.startswith(".")


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


class PendingRunId:
    """The id of a run whose files are being hashed: their SHA-256 on a thread of its own while
    the pool parses them, so the writer maps and sorts the first batches instead of waiting for
    the hash (~0.8 s/GB). The id (:func:`run_id_for` of the hashes) and the refusal of a run
    stored already are those of hashing first: :meth:`result` raises
    :class:`DuplicateRunError` before anything is written (the writer writes nothing before it
    has the id). Call :meth:`result` on the thread that holds ``con``; always :meth:`close`."""

    def __init__(self, con: Connection, path: Path, files: list[Path], jobs: int) -> None:
        self._con, self._path = con, path
        self._stop = threading.Event()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="gpuscope-sha")
        self._hashes = self._thread.submit(file_shas, files, jobs, self._stop)
        self._id: str | None = None
        self._shas: dict[Path, str] = {}

    def done(self) -> bool:
        """Whether :meth:`result` answers without waiting for the hashes."""
        return self._id is not None or self._hashes.done()

    def result(self) -> str:
        """The run's id (waits for the hashes; raises what hashing raised, e.g. OSError);
        DuplicateRunError when a run of the same files is stored."""
        if self._id is None:
            shas = self._hashes.result()
            run_id = run_id_for(shas.values())
            if run_exists(self._con, run_id):
                raise DuplicateRunError(self._path, run_id)
            self._shas, self._id = shas, run_id
        return self._id

    def sha(self, path: Path) -> str:
        """SHA-256 (hex) of ``path``, one of the files (waits as :meth:`result` does)."""
        self.result()
        return self._shas[path]

    def close(self) -> None:
        """Stop hashing (nobody waits for it any more) and its thread; never raises."""
        self._stop.set()
        self._thread.shutdown(wait=True, cancel_futures=True)


class TraceRunWriter:
    """Writes the rank files of one trace run inside the caller's transaction; ``run_id`` may be
    on its way (:class:`PendingRunId`: nothing is written before it is known)."""

    def __init__(
        self,
        con: Connection,
        run_id: str | PendingRunId,
        files: list[Path],
        progress: Progress | None = None,
        metadata: Mapping[str, Any] | None = None,
        job: str | None = None,
        pool: ParsePool | None = None,
        sink: RankSink | None = None,
    ) -> None:
        self.con, self.files = con, files
        self._pending = run_id if isinstance(run_id, PendingRunId) else None
        self.sink = sink  # takes each rank's rows once it is written
        # The files' batches, parsed ahead on other threads (one parse thread when not given).
        self.pool = pool if pool is not None else ParsePool(files, 1)
        self.job = job  # adding ranks to job ``job``'s run: a rank it holds already is refused
        self.metadata = dict(metadata or {})  # the user's, over each rank's trace metadata
        self.inserter = BatchInserter(con, run_id)
        self.progress = progress
        self.total_bytes = sum(p.stat().st_size for p in files)
        self.done_bytes = 0
        self._open_ranks: dict[int, str] = {}
        self._stored_ranks: dict[int, str] | None = None  # read when first needed
        self._rank_rows: list[list[Any]] = []  # `ranks` rows, written by finish()

    @property
    def run_id(self) -> str:
        """The run's id (waits for it when it is on its way; see :class:`PendingRunId`)."""
        return self.inserter.run_id

    def write_rank(self, path: Path, sha: str | None, rank_hint: int | None) -> RankSummary:
        """Write one rank file. ``sha``: its SHA-256 (None: the pending run id's, once known)."""
        file_bytes = path.stat().st_size
        rank: int | None = None
        provisional = False
        # Split and parsed on other threads (the pool), in order; written here.
        for item in self.pool.batches(path):
            if rank is None:
                rank = _rank_of(item.splitter.prefix_meta)
                rank = rank if rank is not None else rank_hint
                if rank is None:  # distributedInfo may still come after the events
                    rank, provisional = -1 - len(self._open_ranks), True
                else:
                    self._check_rank_free(path, rank)
                if self.sink is not None:
                    columns = getattr(self.sink, "columns", None)  # the event columns it reads
                    self.inserter.keep_rank(rank, MAX_KEPT_EVENTS, columns)
            self.inserter.insert_parsed(item.parsed, rank, item.memory_data)
            if self.progress:
                self.progress(self.done_bytes + min(file_bytes, item.offset), self.total_bytes)
        splitter = self.pool.splitter
        assert splitter is not None  # set once the file's batches are all read
        if rank is None:
            raise IngestError(path, "the trace has no events")
        stats = self.inserter.rank_stats(rank)
        if not stats.n_timed:
            raise IngestError(
                path, "the trace has no events with a duration (ph X): only metadata or markers"
            )
        if sha is None:
            assert self._pending is not None
            sha = self._pending.sha(path)
        meta = splitter.metadata
        final_rank = _rank_of(meta)
        if provisional and final_rank is None:
            raise IngestError(
                path, "cannot tell its rank: no distributedInfo.rank and no rank in the file name"
            )
        if final_rank is not None and final_rank != rank:  # distributedInfo came after the events
            self._check_rank_free(path, final_rank)
            self.inserter.rename_rank(rank, final_rank)
            rank = final_rank
        n_events, ts_min, ts_max = stats.n_events, stats.ts_min, stats.ts_max
        base = meta.get("baseTimeNanoseconds")
        base_ns = (
            int(base) if isinstance(base, int | float) and not isinstance(base, bool) else None
        )
        offset = 0 if (ts_min is not None and ts_min > ABSOLUTE_NS) or base_ns is None else base_ns
        info = (
            meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None
        )
        rest = {k: v for k, v in meta.items() if k not in ("deviceProperties", "distributedInfo")}
        rest.update(self.metadata)
        self._rank_rows.append(
            [
                self.run_id,
                rank,
                str(path),
                file_bytes,
                splitter.json_bytes,
                sha,
                base_ns,
                offset,
                (info or {}).get("world_size"),
                (info or {}).get("backend"),
                _json_or_none(meta.get("deviceProperties")),
                _json_or_none(info),
                json.dumps(rest),
                n_events,
                ts_min,
                ts_max,
            ]
        )
        self.done_bytes += file_bytes
        if self.sink is not None:
            self._hand_over(rank)
        return RankSummary(rank, n_events, meta, offset, ts_min, ts_max)

    def _hand_over(self, rank: int) -> None:
        """Give the sink the rank's rows (not when it was too big to keep, or renamed)."""
        assert self.sink is not None
        events = self.inserter.kept_rows(rank)
        if events is None:
            return
        threads = sorted((self.run_id, *r) for r in self.inserter.thread_rows if r[0] == rank)
        names = self.inserter.names.table(self.run_id)
        self.sink.rank_written(
            RankRows(self.run_id, rank, events, threads, [self._rank_rows[-1]], names)
        )

    def _check_rank_free(self, path: Path, rank: int) -> None:
        if self._stored_ranks is None and self.job is None and not self.inserter.run_id_known():
            self._stored_ranks = {}  # a new run: its id is refused when a run of it is stored
        if self._stored_ranks is None:  # the run's ranks stored before this ingest (a job's)
            self.inserter.settle()  # the connection is the flush thread's until then
            self._stored_ranks = {
                int(r): str(p)
                for r, p in self.con.execute(
                    "SELECT rank, path FROM ranks WHERE run_id = ?", [self.run_id]
                ).fetchall()
            }
        stored = self._stored_ranks.get(rank)
        if stored is not None and self.job is not None:
            raise IngestError(
                path,
                f"rank {rank} of job {self.job} is stored already (from {stored}); "
                "nothing was stored",
            )
        taken = stored if stored is not None else self._open_ranks.get(rank)
        if taken is not None and taken != str(path):
            raise IngestError(path, f"rank {rank} is also the rank of {taken}; one file per rank")
        self._open_ranks[rank] = str(path)

    def finish(self) -> None:
        """Write what is buffered: events, names, thread labels, and the ranks' rows (one INSERT:
        on a lake each INSERT is a file of its own)."""
        self.inserter.finish()
        if self._rank_rows:
            one = "(" + ", ".join(["?"] * len(self._rank_rows[0])) + ")"
            self.con.execute(
                "INSERT INTO ranks VALUES " + ", ".join([one] * len(self._rank_rows)),
                [v for row in self._rank_rows for v in row],
            )
            self._rank_rows = []

    def close(self) -> None:
        """Stop the parse threads and free the buffers; never raises."""
        self.pool.close()
        self.inserter.close()


def _json_or_none(v: Any) -> str | None:
    return None if v is None else json.dumps(v)


PEEK_BYTES = 1 << 20  # how much of a file is read to tell a trace from other JSON
# tensorboard_trace_handler's names: {worker}.{unix ms}.pt.trace.json[.gz], worker = host_pid by default
_SPAN_NAME = re.compile(
    r"^(?P<worker>.+)\.(?P<ms>\d{10,})\.pt\.trace\.json(?:\.gz)?$", re.IGNORECASE
)


def not_a_trace(path: Path) -> str | None:
    """Why a JSON file is surely not a trace (None when it is one, or may be): a JSON object whose
    first ``PEEK_BYTES`` (the whole file when shorter) hold no ``traceEvents`` key."""
    head = b""
    try:
        for chunk in iter_json_bytes(path):
            head += chunk
            if len(head) >= PEEK_BYTES:
                return None  # too big to judge from its head: the trace reader decides
    except IngestError:
        return None  # a damaged file: the trace reader names the problem
    text = head.lstrip()
    if not text.startswith(b"{") or b'"traceEvents"' in head:
        return None
    return "not a trace (a JSON object without traceEvents)"


def spans_of_one_process(files: list[Path]) -> str | None:
    """The worker name when every file follows tensorboard_trace_handler's naming with one worker
    (``host_pid.<ms>.pt.trace.json``): spans of one process, not ranks."""
    workers = {m.group("worker") for p in files if (m := _SPAN_NAME.match(p.name))}
    if len(files) > 1 and len(workers) == 1 and all(_SPAN_NAME.match(p.name) for p in files):
        return workers.pop()
    return None


def split_trace_files(path: Path) -> tuple[list[Path], list[str]]:
    """The rank files of a run, and notes on the files of a folder that were skipped (JSON files
    that are not traces, e.g. ``rank0.meta.json`` beside ``rank0.trace.json.gz``)."""
    files = collect_trace_files(path)
    if not path.is_dir():
        return files, []
    keep, notes = [], []
    for p in files:
        why = not_a_trace(p)
        if why is None:
            keep.append(p)
        else:
            notes.append(f"skipped {p.name}: {why}")
    if not keep:
        raise IngestError(path, "folder holds no trace files (" + "; ".join(notes) + ")")
    return keep, notes


def collect_trace_files(path: Path) -> list[Path]:
    """The rank files of a run. In a folder where some files follow torch's ``*.pt.trace.json[.gz]``
    naming, only those are traces (other JSON beside them, e.g. a job's notes, is not); else every
    ``*.json[.gz]`` is."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if is_trace_file(p))
        torch_named = [p for p in files if ".pt.trace.json" in p.name.lower()]
        files = torch_named or files
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


@contextmanager
def duckdb_threads(con: Connection, n: int) -> Iterator[None]:
    """DuckDB on ``n`` threads inside the block, but no more than the cores this process may use
    (:func:`~gpuscope.store.cores.usable_cores`), and on one again after it. The ingest holds
    one thread (its parse threads need the other cores), but the ``after_trace`` hook runs once
    they are done (a 1 GB rank's summary parts on 2 cores: 7.1 s on one thread, 6.2 s on two)."""
    con.execute(f"SET threads = {max(1, min(int(n), usable_cores()))}")
    yield
    # not on an error: the transaction is failing, and a statement on it would fail too and hide
    # the error (a team store whose PostgreSQL stopped); each try of the ingest sets one thread
    # again before its transaction, and ingest_paths restores the settings after the rollback
    con.execute("SET threads = 1")


def after_commit(con: Connection, later: list[AfterCommit]) -> None:
    """Run what the ``after_trace`` hooks left for after the ingest's commit (the summary parts of
    ranks too big to copy, which DuckDB can spill only outside a transaction), under the store's
    own settings again. An exception propagates: the runs stay stored, and what was not stored is
    computed when the run is read."""
    for job in later:
        job(con)


def ingest_trace(
    con: Connection,
    path: Path,
    *,
    name: str | None = None,
    tags: Iterable[str] = (),
    progress: Progress | None = None,
    metadata: Mapping[str, Any] | None = None,
    uploaded_by: str | None = None,
    jobs: int | None = None,
    sinks: RankSinks | None = None,
) -> RunResult:
    """Write one trace run (a file, or a folder of rank files) and its `runs` row, inside the
    caller's transaction (see :func:`ingest_paths`, which makes it all or nothing). ``jobs``:
    threads that parse the files' batches (None: :func:`~gpuscope.ingest.parse_pool.default_jobs`).
    ``sinks``: a run of several rank files hands each rank's rows to ``sinks.rank_sink(run_id, jobs)``
    as it is written, and the sink stores what it made of them before this returns."""
    files, notes = split_trace_files(path)
    pool = ParsePool(files, jobs or default_jobs())  # parsing starts while the files are hashed
    pending = PendingRunId(con, path, files, jobs or default_jobs())
    try:
        sink = (
            sinks.rank_sink(pending.result(), pool.jobs)
            if sinks is not None and len(files) > 1
            else None
        )
    except BaseException:
        pending.close()
        pool.close()
        raise
    writer = TraceRunWriter(con, pending, files, progress, metadata, pool=pool, sink=sink)
    try:
        hints = _rank_hints(files)
        ranks = [writer.write_rank(p, None, h) for p, h in zip(files, hints, strict=True)]
        writer.finish()
        run_id = writer.run_id
        if sink is not None:
            sink.store(con)
    except IngestError as e:
        worker = spans_of_one_process(files)
        if worker is not None and ("rank" in e.problem):
            raise IngestError(
                path,
                f"{len(files)} files of one worker ({worker}.<ms>.pt.trace.json): they look like "
                "profiling spans of one process, not ranks; ingest them with --separate "
                "(each file its own run)",
            ) from None
        raise
    finally:
        writer.close()
        pending.close()
        if sink is not None:
            sink.close()
    rank0 = min(ranks, key=lambda r: r.rank)
    props = rank0.meta.get("deviceProperties")
    gpu = (
        props[0].get("name")
        if isinstance(props, list) and props and isinstance(props[0], dict)
        else None
    )
    starts = [r.ts_min_ns + r.offset_ns for r in ranks if r.ts_min_ns is not None]
    ends = [r.ts_max_ns + r.offset_ns for r in ranks if r.ts_max_ns is not None]
    row = RunRow(
        run_id=run_id,
        name=name or distinct_name(con, default_run_name(path.name, rank0.meta)),
        kind="trace",
        n_ranks=len(files),
        n_events=sum(r.n_events for r in ranks),
        source_bytes=sum(p.stat().st_size for p in files),
        gpu_name=gpu,
        torch_version=_torch_version(rank0.meta),
        tags=list(tags),
        start_ns=min(starts) if starts else None,
        end_ns=max(ends) if ends else None,
        uploaded_by=uploaded_by,
    )
    row.insert(con)
    result = RunResult(
        run_id,
        row.name,
        "trace",
        row.n_ranks,
        row.n_events,
        [str(p) for p in files],
        gpu_name=gpu,
        uploaded_by=uploaded_by,
    )
    result.warnings += notes
    odd = writer.inserter.odd_warning()
    if odd:
        result.warnings.append(odd)
    return result


def _torch_version(meta: dict[str, Any]) -> str | None:
    for key in ("torch_version", "pytorch_version", "gpuscope.torch_version"):
        v = meta.get(key)
        if isinstance(v, str):
            return v
    return None


def ingest_paths(
    con: Connection,
    paths: Iterable[str | Path],
    *,
    name: str | None = None,
    tags: Iterable[str] = (),
    attach: str | None = None,
    tz: str | None = None,
    progress: Progress | None = None,
    separate: bool = False,
    smi_columns: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    uploaded_by: str | None = None,
    job: str | None = None,
    after_trace: AfterTrace | None = None,
    jobs: int | None = None,
) -> list[RunResult]:
    """Ingest each path as one run; the runs are published together (one transaction), or not at all.

    ``con``: the :class:`~gpuscope.store.Store` (its write lock is held throughout, so a
    reader in any process sees every run of the call or none), or a bare DuckDB connection.

    ``metadata``: top-level trace metadata the user adds to every rank of every trace run, over
    what the files hold (e.g. ``{"gpuscope.untraced_step_ms": 12.3}`` for a trace recorded without
    ``gpuscope.capture``). ``uploaded_by``: who stores the runs (``runs.uploaded_by``; None: unknown).

    ``smi_columns``: the ``--query-gpu`` list of headerless nvidia-smi CSV logs
    (``--format=csv,noheader``). ``separate``: each trace file of a folder is a run of its own (e.g. the profiling spans that
    ``tensorboard_trace_handler`` writes for one process), instead of one rank of a single run.

    A path is a trace file, a folder holding one trace file per rank (NVML series files beside them
    are attached to that run), or an NVML series file (a run of its own, or attached to the existing
    run ``attach``). ``tz``: zone of nvidia-smi's local timestamps. A path whose content is already
    stored is reported with ``duplicate=True`` and not written again. On any error nothing is
    stored.

    ``job``: every trace file of ``paths`` (files, or folders of them) is a rank of job ``job``'s
    run, which they are added to (:mod:`gpuscope.ingest.job`; one result). ``after_trace(con,
    result)`` runs inside the transaction after each trace run is written (the orchestrating code
    computes the rank summaries there); an exception from it rolls everything back. It runs in
    the calling thread, on ``con``. What it returns, if callable, is called with ``con`` once the
    transaction has committed, under the store's own settings, before this returns (the summary
    parts of ranks too big to copy; an exception from it propagates, the runs stay stored).

    ``jobs``: threads that split and parse the trace files' batches while this thread writes them
    (None: :func:`~gpuscope.ingest.parse_pool.default_jobs`, the cores); rows are the same for any
    number. Memory stays bounded: about ``jobs + 1`` batches are parsed ahead of the writer.
    """
    if job is not None:
        return _ingest_job(
            con,
            [Path(p) for p in paths],
            job=job,
            name=name,
            tags=tags,
            progress=progress,
            metadata=metadata,
            uploaded_by=uploaded_by,
            after_trace=after_trace,
            jobs=jobs,
        )
    files = [Path(p) for p in paths]
    if separate:
        files = [f for p in files for f in (split_trace_files(p)[0] if p.is_dir() else [p])]
    # One DuckDB thread: the scanning thread needs the other core, and on 2 cores the ingest then
    # spends about a third less CPU (benchmarks/bench_ingest.py). A memory limit keeps the peak
    # flat whatever the trace size (DuckDB spills beyond it). Both restored afterwards.
    settings = con.execute(
        "SELECT current_setting('threads'), current_setting('memory_limit')"
    ).fetchone()
    assert settings is not None  # a SELECT without FROM answers one row
    threads, memory = settings
    con.execute("SET threads = 1")
    con.execute(f"SET memory_limit = '{INGEST_MEMORY_LIMIT}'")

    later: list[AfterCommit] = []

    def once() -> list[RunResult]:
        later.clear()  # a try after a failed one starts again
        con.execute("SET threads = 1")  # a try after a failed one starts on one thread again
        with transaction(con):
            return _ingest_paths(
                con,
                files,
                name=name,
                tags=tags,
                attach=attach,
                tz=tz,
                progress=progress,
                smi_columns=smi_columns,
                metadata=metadata,
                uploaded_by=uploaded_by,
                after_trace=after_trace,
                jobs=jobs,
                hook_threads=int(threads),
                later=later,
            )

    try:
        results = con.retrying(once) if isinstance(con, Store) else once()
    finally:
        con.execute(f"SET threads = {int(threads)}")
        con.execute(f"SET memory_limit = '{memory}'")
    after_commit(con, later)
    return results


def _ingest_paths(
    con: Connection,
    paths: list[Path],
    *,
    name: str | None,
    tags: Iterable[str],
    attach: str | None,
    tz: str | None,
    progress: Progress | None,
    smi_columns: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    uploaded_by: str | None = None,
    after_trace: AfterTrace | None = None,
    jobs: int | None = None,
    hook_threads: int = 1,
    later: list[AfterCommit],
) -> list[RunResult]:
    results: list[RunResult] = []
    series: list[tuple[Path, str | None, int]] = []  # (file, run to attach to, index in results)
    one_name = name if len(paths) == 1 else None
    for p in paths:
        if p.is_file() and is_nvml_file(p):
            results.append(RunResult("", one_name or "", "nvml", 0, 0, [str(p)]))
            series.append((p, attach, len(results) - 1))
            continue
        if attach:
            raise IngestError(p, "--attach takes NVML series files only")
        extra = (
            sorted(q for q in p.iterdir() if q.is_file() and is_nvml_file(q)) if p.is_dir() else []
        )
        if extra and not any(is_trace_file(q) for q in p.iterdir()):
            for q in extra:  # a folder of series only: each is a run of its own
                results.append(RunResult("", "", "nvml", 0, 0, [str(q)]))
                series.append((q, None, len(results) - 1))
            continue
        try:
            result = ingest_trace(
                con,
                p,
                name=one_name,
                tags=tags,
                progress=progress,
                metadata=metadata,
                uploaded_by=uploaded_by,
                jobs=jobs,
                sinks=after_trace if isinstance(after_trace, RankSinks) else None,
            )
        except DuplicateRunError as e:
            results.append(_duplicate(con, e, p))
            continue
        if after_trace is not None:
            with duckdb_threads(con, hook_threads):
                deferred = after_trace(con, result)
            if callable(deferred):
                later.append(deferred)
        results.append(result)
        series += [(q, result.run_id, -1) for q in extra]
    _write_series(
        con,
        series,
        results,
        name=one_name,
        tags=tags,
        tz=tz,
        smi_columns=smi_columns,
        uploaded_by=uploaded_by,
    )
    return results


def _write_series(
    con: Connection,
    series: list[tuple[Path, str | None, int]],
    results: list[RunResult],
    *,
    name: str | None,
    tags: Iterable[str],
    tz: str | None,
    smi_columns: str | None = None,
    uploaded_by: str | None = None,
) -> None:
    for path, run_id, index in series:
        try:
            info = ingest_series(
                con,
                path,
                run_id=run_id,
                name=name,
                tags=tags,
                tz=tz,
                smi_columns=smi_columns,
                uploaded_by=uploaded_by,
            )
        except DuplicateRunError as e:
            if index >= 0:
                results[index] = _duplicate(con, e, path)
            continue
        if index >= 0:
            results[index] = info.run_result()
        else:
            owner = next(r for r in results if r.run_id == run_id)
            owner.paths.append(str(path))
            owner.warnings += list(info.warnings)


def _duplicate(con: Connection, e: DuplicateRunError, path: Path) -> RunResult:
    row = con.execute(
        "SELECT name, kind, n_ranks, n_events, gpu_name, uploaded_by FROM runs WHERE run_id = ?",
        [e.run_id],
    ).fetchone()
    if row is None:
        return RunResult(e.run_id, display_name(path), "trace", 0, 0, [str(path)], duplicate=True)
    return RunResult(
        e.run_id,
        row[0],
        row[1],
        row[2],
        row[3],
        [str(path)],
        duplicate=True,
        gpu_name=row[4],
        uploaded_by=row[5],
    )


def distinct_name(con: Connection, name: str) -> str:
    """A name gpuscope made (from a file or folder name, or from the trace's content) that
    another run already has gets `` (2)``, `` (3)``, …, so that every run the user did not name
    can be told apart by name (in the Runs list, the pickers, and ``analyze NAME``). A name the
    user gave is never passed here: it is kept as it is."""
    taken = {
        str(r[0])
        for r in con.execute(
            "SELECT name FROM runs WHERE name = ? OR name LIKE ?", [name, f"{name} (%)"]
        ).fetchall()
    }
    if name not in taken:
        return name
    n = 2
    while f"{name} ({n})" in taken:
        n += 1
    return f"{name} ({n})"


def _ingest_job(
    con: Connection,
    paths: list[Path],
    *,
    job: str,
    name: str | None,
    tags: Iterable[str],
    progress: Progress | None,
    metadata: Mapping[str, Any] | None,
    uploaded_by: str | None,
    after_trace: AfterTrace | None,
    jobs: int | None = None,
) -> list[RunResult]:
    """``ingest_paths(..., job=job)``: the trace files of ``paths`` added to the job's run."""
    job = J.check_job_id(job)
    files: list[Path] = []
    for p in paths:
        if p.is_file() and is_nvml_file(p):
            raise IngestError(p, "--job takes trace files (attach NVML series with --attach)")
        files += split_trace_files(p)[0]
    seen: dict[str, Path] = {}
    for f in files:
        key = str(f.resolve())
        if key in seen:
            raise IngestError(f, "given twice")
        seen[key] = f
    made = J.ensure_job_run(con, job, name, uploaded_by)
    settings = con.execute(
        "SELECT current_setting('threads'), current_setting('memory_limit')"
    ).fetchone()
    assert settings is not None
    threads, memory = settings
    con.execute("SET threads = 1")
    con.execute(f"SET memory_limit = '{INGEST_MEMORY_LIMIT}'")

    later: list[AfterCommit] = []

    def once() -> list[RunResult]:
        later.clear()  # a try after a failed one starts again
        con.execute("SET threads = 1")  # a try after a failed one starts on one thread again
        with transaction(con):
            result = _write_job_files(
                con,
                job,
                files,
                name=name,
                tags=tags,
                progress=progress,
                metadata=metadata,
                jobs=jobs,
            )
            if after_trace is not None:
                with duckdb_threads(con, int(threads)):
                    deferred = after_trace(con, result)
                if callable(deferred):
                    later.append(deferred)
            return [result]

    try:
        results = con.retrying(once, J.JOB_RETRIES) if isinstance(con, Store) else once()
    except BaseException:
        if made:
            J.drop_empty_job_run(con, job)
        raise
    finally:
        con.execute(f"SET threads = {int(threads)}")
        con.execute(f"SET memory_limit = '{memory}'")
    after_commit(con, later)  # committed: a failure here leaves the job's run as it is
    return results


def _write_job_files(
    con: Connection,
    job: str,
    files: list[Path],
    *,
    name: str | None,
    tags: Iterable[str],
    progress: Progress | None,
    metadata: Mapping[str, Any] | None,
    jobs: int | None = None,
) -> RunResult:
    """Inside the caller's transaction: add ``files`` (one rank each) to job ``job``'s run (which
    :func:`~gpuscope.ingest.job.ensure_job_run` made). Raises IngestError for a rank the run holds already."""
    run_id = J.job_run_id(job)
    n = jobs or default_jobs()
    writer = TraceRunWriter(
        con, run_id, files, progress, metadata, job=job, pool=ParsePool(files, n)
    )
    try:
        writer.inserter.names.seed(J.existing_names(con, run_id))
        shas = file_shas(files, n)
        hints = [rank_from_name(p) for p in files]
        ranks = [writer.write_rank(p, shas[p], h) for p, h in zip(files, hints, strict=True)]
        writer.finish()
    finally:
        writer.close()
    row = J.rewrite_job_row(con, job, name, tags)
    ws = J.world_size(con, run_id)
    result = RunResult(
        run_id,
        row.name,
        "trace",
        row.n_ranks,
        row.n_events,
        [str(p) for p in files],
        gpu_name=row.gpu_name,
        uploaded_by=row.uploaded_by,
    )
    added = sorted(r.rank for r in ranks)
    of = f" of world size {ws}" if ws else ""
    result.warnings.append(
        f"job {job}: added rank(s) {J.ranges_text(added)}; the run holds {row.n_ranks} rank(s){of}"
    )
    return result
