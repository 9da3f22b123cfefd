"""Parse trace batches on several threads while one thread writes them to the store.

A run's rank files are split into batches (:mod:`gpuscope.ingest.json_stream`) by one *splitting*
thread, in file order; each batch is parsed to Arrow (the compiled parser, else DuckDB's JSON
reader, else the msgspec fallback, in :class:`~gpuscope.ingest.batch_insert.BatchParser`) by one of
``jobs`` worker threads, each with a DuckDB database of its own (the compiled parser and DuckDB
release the GIL while they parse); the writer (the
thread that holds the store's connection and its transaction) takes the parsed batches in file and
batch order, so names get the same ids, and rows the same values, as a serial ingest.

The splitter cuts at a separator between events (Kineto's, or that of any other layout: one line,
compact) without proving the cut (a strict syntax pass, ~1.2 CPU s/GB): the batch's parse proves
it, since the compiled parser reads only a JSON array of objects (where it refuses a batch, the cut
is checked there). A cut that does not prove out (the separator inside a string or an event)
makes the pool split that file again from that batch, proving every cut, as before
(:class:`~gpuscope.ingest.json_stream.UnprovenCut`).

Memory is bounded whatever the number or size of the files: at most ``depth`` batches
(:data:`~gpuscope.ingest.json_stream.BATCH_BYTES` of JSON each, plus their Arrow tables) are
parsed or waiting at a time, besides the one being written.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope.ingest import batch_insert, json_stream
from gpuscope.ingest.arrow_memory import use_system_pool
from gpuscope.ingest.batch_insert import BatchParser, Parsed
from gpuscope.ingest.env import positive_int
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.json_stream import Batch, TraceSplitter, UnprovenCut
from gpuscope.ingest.source import file_sha256, iter_json_bytes
from gpuscope.store import usable_cores

ENV_JOBS = "GPUSCOPE_INGEST_JOBS"  # parse threads of an ingest when the caller names none


def default_jobs() -> int:
    """Parse threads of an ingest: ``$GPUSCOPE_INGEST_JOBS``, else the cores this process may use."""
    cores = usable_cores()
    try:
        return positive_int(ENV_JOBS, max(1, cores))
    except ValueError as e:
        raise IngestError(ENV_JOBS, str(e)) from None


@dataclass
class ParsedBatch:
    """One batch, parsed: its file's splitter (``prefix_meta`` is set), where it starts in the
    file (bytes), its JSON text when it holds allocator events (for ``memory_events``; else None),
    and its rows."""

    splitter: TraceSplitter
    offset: int
    memory_data: bytes | None
    parsed: Parsed


class ParsePool:
    """The parsed batches of ``files``, in order, ``jobs`` threads parsing ahead of the writer.

    Use :meth:`batches` once per file, in the order of ``files``; after it is exhausted,
    :attr:`splitter` is that file's (its metadata). :meth:`close` stops the threads (always call
    it: ``with ParsePool(...) as pool``). An error while splitting or parsing a batch is raised
    from :meth:`batches` where that batch comes in order, so the writer sees the first fault of
    the files as a serial ingest would.
    """

    def __init__(
        self, files: list[Path], jobs: int, depth: int | None = None, *, prove_cuts: bool = False
    ) -> None:
        use_system_pool()  # Arrow buffers made here are freed on other threads (arrow_memory.py)
        self.files = list(files)
        self.jobs = max(1, int(jobs))
        self.depth = depth if depth is not None else self.jobs
        self._stop = threading.Event()
        self._local = threading.local()
        self._parsers: list[BatchParser] = []
        self._parsers_lock = threading.Lock()
        self._splitters: list[TraceSplitter] = []  # every one made: close() abandons their counts
        self._pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="gpuscope-parse")
        self._next = 0
        self.splitter: TraceSplitter | None = None
        self._start_split(0, 0, prove=prove_cuts)  # prove_cuts: every cut proven by the splitter

    # -- the splitting thread ---------------------------------------------------------------------
    def _start_split(self, first: int, skip: int, *, prove: bool) -> None:
        """A splitting thread from file ``first`` on, leaving out that file's first ``skip``
        batches; ``prove``: every cut proven by the splitter (else the fast cuts by their parse)."""
        self._q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=self.depth)
        self._split_stop = threading.Event()
        self._thread = threading.Thread(
            target=self._split,
            args=(first, skip, prove, self._q, self._split_stop),
            name="gpuscope-split",
            daemon=True,
        )
        self._thread.start()

    def _put(self, q: queue.Queue[tuple[str, Any]], stop: threading.Event, item: Any) -> bool:
        while not (self._stop.is_set() or stop.is_set()):
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _split(
        self,
        first: int,
        skip: int,
        prove: bool,
        q: queue.Queue[tuple[str, Any]],
        stop: threading.Event,
    ) -> None:
        try:
            for i in range(first, len(self.files)):
                path = self.files[i]
                # BATCH_BYTES looked up now (tests make it small to have many batches)
                splitter = TraceSplitter(
                    path, iter_json_bytes(path), json_stream.BATCH_BYTES, prove_cuts=prove
                )
                with self._parsers_lock:
                    self._splitters.append(splitter)
                for k, batch in enumerate(splitter.batches()):
                    if self._stop.is_set() or stop.is_set():
                        return
                    if i == first and k < skip:
                        continue  # written already: cut at the same places, now proven
                    strict = batch_insert.strict_json(batch)  # looked up here: tests swap it
                    fut = self._pool.submit(self._parse, splitter, batch, strict)
                    if not self._put(q, stop, ("batch", fut)):
                        return
                if not self._put(q, stop, ("end", splitter)):
                    return
        except BaseException as e:  # handed to the writer, in order
            self._put(q, stop, ("error", e))

    def _restart(self, index: int, written: int) -> None:
        """A cut of file ``index`` did not prove out at its batch ``written``: split that file
        again from there (the same cuts before it, each one proven now), and the files after it,
        proving every cut. The batches already handed on stand: each parsed as a JSON array of
        objects, so each ended between two events."""
        self._stop_split()
        self._start_split(index, written, prove=True)

    def _stop_split(self) -> None:
        """Stop the splitting thread; cancel the batches it queued (never raises)."""
        self._split_stop.set()
        while self._thread.is_alive():  # unblock the splitter waiting on a full queue
            with suppress(queue.Empty):
                kind, value = self._q.get_nowait()
                if kind == "batch":
                    value.cancel()
            self._thread.join(0.01)
        while True:
            try:
                kind, value = self._q.get_nowait()
            except queue.Empty:
                break
            if kind == "batch":
                value.cancel()
        with self._parsers_lock:
            for sp in self._splitters:  # a parse still waiting on a cancelled batch's count
                sp.counts.abandon()

    # -- the parse threads ------------------------------------------------------------------------
    def _parser(self) -> BatchParser:
        p: BatchParser | None = getattr(self._local, "parser", None)
        if p is None:
            p = BatchParser()
            with self._parsers_lock:
                self._parsers.append(p)
            self._local.parser = p
        return p

    def _parse(self, splitter: TraceSplitter, batch: Batch, strict: bool) -> ParsedBatch:
        parsed = self._parser().parse(splitter.path, batch, strict=strict)
        return ParsedBatch(splitter, batch.offset, parsed.memory_data(batch.data), parsed)

    # -- the writer's side ------------------------------------------------------------------------
    def batches(self, path: Path) -> Iterator[ParsedBatch]:
        """The parsed batches of ``path``, the next file of ``files``."""
        if self._next >= len(self.files) or self.files[self._next] != path:
            raise ValueError(f"{path}: not the next file of the pool")
        index = self._next
        self._next += 1
        self.splitter = None
        written = 0
        while True:
            kind, value = self._q.get()
            if kind == "batch":
                fut: Future[ParsedBatch] = value
                try:
                    parsed = fut.result()
                except UnprovenCut:
                    self._restart(index, written)
                    continue
                written += 1
                yield parsed
            elif kind == "end":
                self.splitter = value
                return
            else:
                raise value

    def close(self) -> None:
        """Stop splitting and parsing, wait for the threads, free the parsers; never raises."""
        self._stop.set()
        self._stop_split()
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._parsers_lock:
            for p in self._parsers:
                p.close()
            self._parsers = []

    def __enter__(self) -> ParsePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def file_shas(files: list[Path], jobs: int, stop: threading.Event | None = None) -> dict[Path, str]:
    """SHA-256 of each file (hex), on up to ``jobs`` threads (hashlib releases the GIL); ``stop``
    set: CancelledError (see :func:`~gpuscope.ingest.source.file_sha256`)."""
    if len(files) <= 1 or jobs <= 1:
        return {p: file_sha256(p, stop) for p in files}
    with ThreadPoolExecutor(min(jobs, len(files)), thread_name_prefix="gpuscope-sha") as ex:
        return dict(zip(files, ex.map(lambda p: file_sha256(p, stop), files), strict=True))
