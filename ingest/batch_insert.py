"""Insert batches of trace events into the store, in SQL.

A batch is a JSON array of whole events, cut out of the file by :mod:`gpuscope.ingest.json_stream`.
Three readers, tried in turn:
1. the compiled parser (:mod:`gpuscope.ingest.compiled_parser`) reads it straight into the parsed
   layout, or refuses it when it is not certain to read it exactly as DuckDB would;
2. DuckDB's own JSON reader parses it into the typed *raw* layout (Arrow);
3. when a batch is not strict JSON or DuckDB refuses it (raw control characters inside strings, a
   wrong type...), the msgspec decoder in :mod:`gpuscope.ingest.kineto` reads it, accepting the known
   quirks and otherwise naming the offending event.
All end in the same code that maps names (stored once per run) and non-numeric pids/tids to
integers, so they write identical rows.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb
from gpuscope.ingest import compiled_parser
from gpuscope.ingest.env import positive_int
from gpuscope.ingest.errors import IngestError
from gpuscope.store import (
    ALLOCATOR_SETTINGS,
    LAKE,
    extensions,
    pid_alive,
    raise_if_stopping,
)
from gpuscope.store.schema import EVENTS

# pyarrow, msgspec and the decoder are imported where they are used: every ``gpuscope`` command
# imports this module (for :func:`remove_own_scratch`), and only an ingest needs them (0.2 s).
if TYPE_CHECKING:
    from collections.abc import Iterable

    import pyarrow as pa
    from gpuscope.ingest.json_stream import Batch

# The event keys gpuscope keeps, as DuckDB types; other keys are skipped by the reader.
ARGS_STRUCT = (
    'STRUCT(correlation BIGINT, "External id" BIGINT, device INTEGER, stream BIGINT, grid INTEGER[], '
    'block INTEGER[], "registers per thread" INTEGER, "shared memory" BIGINT, bytes BIGINT, '
    '"Input Dims" JSON, "Input type" JSON, "Concrete Inputs" JSON, flops DOUBLE, "Sequence number" BIGINT, '
    '"Fwd thread id" BIGINT, "Python id" BIGINT, "Python parent id" BIGINT, name VARCHAR)'
)
COLUMNS = (
    "{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', ts: 'DOUBLE', "
    f"dur: 'DOUBLE', id: 'VARCHAR', args: '{ARGS_STRUCT}'}}"
)
RAW_FROM_JSON = """
SELECT ph, cat, name,
       TRY_CAST(pid AS BIGINT) AS pid_num, CASE WHEN TRY_CAST(pid AS BIGINT) IS NULL THEN pid END AS pid_label,
       TRY_CAST(tid AS BIGINT) AS tid_num, CASE WHEN TRY_CAST(tid AS BIGINT) IS NULL THEN tid END AS tid_label,
       ts, dur, TRY_CAST(id AS BIGINT) AS flow_id,
       args.correlation AS correlation, args."External id" AS external_id, args.device AS device,
       args.stream AS stream, args.grid AS grid, args.block AS block,
       args."registers per thread" AS registers, args."shared memory" AS shared_mem, args.bytes AS bytes,
       args."Input Dims"::VARCHAR AS input_dims, args."Input type"::VARCHAR AS input_types,
       args."Concrete Inputs"::VARCHAR AS concrete_inputs, args.flops AS flops,
       args."Sequence number" AS seq_num, args."Fwd thread id" AS fwd_tid, args."Python id" AS python_id,
       args."Python parent id" AS python_parent_id, args.name AS meta_name, NULL::VARCHAR AS odd_args
FROM read_json('{path}', format = 'array', columns = {columns}, maximum_object_size = {max_bytes})
"""


@cache
def _syntax_decoder() -> Any:
    import msgspec

    return msgspec.json.Decoder(list[msgspec.Raw])


def strict_json(batch: Batch) -> bool:
    """Whether the batch is strict JSON (DuckDB's reader would forgive trailing commas and the like).

    Cheap (a syntax pass, no objects built); runs on the scanning thread, ahead of the insert.
    """
    if batch.strict is not None:  # proven when it was cut
        return batch.strict
    import msgspec

    try:
        _syntax_decoder().decode(batch.data)
    except msgspec.DecodeError:
        return False
    return True


MEMORY_MARK = b'"[memory]"'  # a batch holding this may hold allocator events (memory_events)

# Events buffered before they are written to the store (one Parquet file each); $GPUSCOPE_FLUSH_ROWS
# sets it (fewer rows: less memory, more files). 65,536 held ~60 MB more in the 1 GB benchmark's
# write; 32,768 makes twice the files, and its `analyze` ~4 % slower (docs/benchmarks.md).
ENV_FLUSH_ROWS = "GPUSCOPE_FLUSH_ROWS"
FLUSH_ROWS = 32_768
# Sorted chunks (Arrow bytes) held while the run's id is on its way (the files' SHA-256, ~0.75 CPU
# s/GB on a thread of its own): beyond this the writer waits for it. 32 MiB: ~155 K events of a
# Kineto trace (~215 B a row, ~50 MB of its JSON); 64 MiB raised a 1 GB rank's write peak from
# 0.34x to 0.42x the file (benchmarks/ingest_sha_ab.py).
MAX_UNNAMED_BYTES = 32 << 20
# The batch's rows as ``events`` holds them, cast to its column types so every batch's Arrow table
# has one schema (the fast and the fallback reader type some columns differently).
_EVENT_EXPRS = {
    "run_id": "?",
    "rank": "?",
    "ph": "coalesce(ph, '')",
    "cat": "coalesce(cat, '')",
    "ts_ns": "round(ts * 1000)",
    "dur_ns": "round(dur * 1000)",
}
TO_EVENTS = "SELECT {} FROM _gs_raw".format(
    ", ".join(
        f"CAST({_EVENT_EXPRS.get(c.name, c.name)} AS {c.type.replace(' NOT NULL', '')}) AS {c.name}"
        for c in EVENTS.columns
    )
)
# The columns the writer fills in (the run, the rank, ids that are per run); a parser leaves them
# NULL, typed, and adds the raw columns they are made from (:data:`MAPPED_FROM`).
_WRITER_COLUMNS = ("run_id", "rank", "name_id", "pid", "tid")
MAPPED_FROM = ("name", "pid_num", "pid_label", "tid_num", "tid_label", "meta_name")
EVENT_NAMES = tuple(c.name for c in EVENTS.columns)
# The columns of the writer's buffered rows: every one of ``events`` but ``run_id``, one value
# that each chunk's INSERT writes (:meth:`BatchInserter._write`): a column of it would be made,
# concatenated, sorted and read into DuckDB again for every row (~0.4 CPU s a GB).
BUFFERED_NAMES = EVENT_NAMES[1:]
assert EVENT_NAMES[0] == "run_id"
# A parser's query: the raw layout (``{src}``) cast to ``events``' columns, the writer's left NULL.
TO_PARSED = "SELECT {}, {} FROM {{src}}".format(
    ", ".join(
        f"CAST({'NULL' if c.name in _WRITER_COLUMNS else _EVENT_EXPRS.get(c.name, c.name)} "
        f"AS {c.type.replace(' NOT NULL', '')}) AS {c.name}"
        for c in EVENTS.columns
    ),
    ", ".join(MAPPED_FROM),
)
PARSER_MEMORY_LIMIT = "128MB"  # each parse thread's own DuckDB database (it spills beyond)

# How the flush thread writes a chunk's Parquet file on a local store: pyarrow's writer, the file
# registered in the ingest's transaction with ``ducklake_add_data_files`` (~1.2 CPU s per GB of
# JSON less than DuckDB's INSERT, which copies the chunk into a buffer of its own and hashes every
# value of every column for its dictionaries; docs/benchmarks.md, "Where a byte's cost goes").
# ``$GPUSCOPE_PARQUET_WRITER=duckdb`` writes with the INSERT (as team stores always do).
ENV_PARQUET_WRITER = "GPUSCOPE_PARQUET_WRITER"
# The columns pyarrow dictionary-encodes: those of few distinct values in a chunk (strings of a
# few categories, ids, launch shapes, the ops' JSON). Times, durations and the ids that grow row
# by row are written plain: a dictionary of them is built and thrown away, for files no smaller
# (every column's: pyarrow's write of the 1 GB trace's chunks 1.14-1.22 CPU s, 42.9 MB; these:
# 0.91-0.94 s, 39.2 MB; 3 runs each, interleaved).
DICTIONARY_COLUMNS = (
    "run_id", "ph", "cat", "name_id", "pid", "tid", "device", "stream", "grid", "block",
    "registers", "shared_mem", "bytes", "input_dims", "input_types", "concrete_inputs", "flops",
    "fwd_tid", "odd_args",
)  # fmt: skip
JSON_COLUMNS = tuple(c.name for c in EVENTS.columns if c.type == "JSON")
# ``events``' NOT NULL columns of a chunk: a chunk with a NULL in one is written by the INSERT,
# which refuses it (``ducklake_add_data_files`` does not check).
NOT_NULL_COLUMNS = tuple(
    c.name for c in EVENTS.columns if c.type.endswith("NOT NULL") and c.name != "run_id"
)
FILE_PREFIX = "gpuscope-"  # + 32 hex digits + ".parquet": the events files pyarrow writes


@dataclass
class RankStats:
    """Events of one rank written so far: count, those with a duration, extent (trace ns)."""

    n_events: int = 0
    n_timed: int = 0
    ts_min: int | None = None
    ts_max: int | None = None

    def add(self, n: int, timed: int, lo: int | None, hi: int | None) -> None:
        self.n_events += n
        self.n_timed += timed
        if lo is not None:
            self.ts_min = lo if self.ts_min is None else min(self.ts_min, lo)
        if hi is not None:
            self.ts_max = hi if self.ts_max is None else max(self.ts_max, hi)


@dataclass
class Parsed:
    """One batch parsed (:class:`BatchParser`): its rows in ``events``' layout with the writer's
    columns still NULL (plus :data:`MAPPED_FROM`), their counts and extent, and how it was read."""

    table: pa.Table
    n_timed: int
    ts_min: int | None
    ts_max: int | None
    fallback: bool = False  # read by the msgspec decoder (not DuckDB's JSON reader)
    odd_events: int = 0
    odd_examples: list[str] = field(default_factory=list)
    #: whether the batch's text holds :data:`MEMORY_MARK`, where the parse looked (the compiled
    #: parser, in C without the GIL); None: not looked, see :meth:`memory_data`
    memory_mark: bool | None = None

    def memory_data(self, data: bytes) -> bytes | None:
        """The batch's text ``data`` when it may hold allocator events (``memory_events``), else
        None."""
        mark = self.memory_mark if self.memory_mark is not None else MEMORY_MARK in data
        return data if mark else None


class BatchParser:
    """Parses batches to Arrow (:meth:`parse`) in a DuckDB database of its own: one per thread;
    several parse at once (DuckDB releases the GIL). Holds a scratch file until :meth:`close`."""

    def __init__(self) -> None:
        sweep_scratch()
        fd, name = tempfile.mkstemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", suffix=".json")
        os.close(fd)
        self.scratch = Path(name)
        # one thread from the start: a default connection first starts a thread per core of the
        # machine (16 on a 16-core host the process is pinned to 2 of), which SET then stops
        self.db = duckdb.connect(":memory:", config={**extensions.OFFLINE, "threads": 1})
        self.db.execute(f"SET memory_limit = '{PARSER_MEMORY_LIMIT}'")
        for setting in ALLOCATOR_SETTINGS:
            self.db.execute(setting)

    def parse(self, path: Path, batch: Batch, *, strict: bool = True) -> Parsed:
        """The batch's rows. Raises IngestError for bad events.

        ``strict``: the batch passed :func:`strict_json`; otherwise it goes straight to the decoder
        that reads the known quirks and names anything else. A batch cut without a proof
        (``batch.proven`` False) is proven here, its events told to its splitter's counts, or
        :class:`~gpuscope.ingest.json_stream.UnprovenCut` is raised."""
        try:
            return self._parse(path, batch, strict)
        finally:
            batch.tell(0)  # failed before its events were told: the batches after it wait no more

    def _parse(self, path: Path, batch: Batch, strict: bool) -> Parsed:
        odd: tuple[int, list[str]] = (0, [])
        if strict and compiled_parser.enabled():
            scanned = compiled_parser.scan(batch.data)
            if scanned is not None:  # it reads only a strict JSON array of objects: a proof
                table = _names_coded(scanned.table)
                batch.tell(table.num_rows)
                n_timed, lo, hi = _extent(path, table)
                return Parsed(table, n_timed, lo, hi, memory_mark=scanned.memory_mark)
        if not batch.proven:  # the compiled parser refused it: the cut is proven another way
            from gpuscope.ingest.json_stream import UnprovenCut, count_events

            n = count_events(batch.data)
            if n is None:
                raise UnprovenCut(batch.offset)
            batch.tell(n)
        if strict:
            self.scratch.write_bytes(batch.data)
            # The reader's buffers follow maximum_object_size: the batch's own size keeps them (and
            # the memory limit) small; a batch is whole events, so no object is bigger.
            raw_sql = RAW_FROM_JSON.format(
                path=str(self.scratch).replace("'", "''"),
                columns=COLUMNS,
                max_bytes=max(len(batch.data) + 1024, 1 << 20),
            )
            try:
                table = self.db.execute(TO_PARSED.format(src=f"({raw_sql})")).to_arrow_table()
            except duckdb.Error:
                strict = False  # reads the quirk or the odd types, or names the bad JSON
        if not strict:
            raw, odd = self._decode(path, batch)
            _gs_raw = raw
            table = self.db.execute(TO_PARSED.format(src="_gs_raw")).to_arrow_table()
            del _gs_raw
        table = _names_coded(table)
        n_timed, lo, hi = _extent(path, table)
        return Parsed(table, n_timed, lo, hi, not strict, odd[0], odd[1])

    @staticmethod
    def _decode(path: Path, batch: Batch) -> tuple[pa.Table, tuple[int, list[str]]]:
        from gpuscope.ingest.kineto import decode_batch, odd_notes, to_raw

        events = decode_batch(path, batch)
        n_odd = sum(1 for e in events if getattr(e, "odd", None))
        notes = odd_notes(path, events, batch.first_event()) if n_odd else []
        return to_raw(events), (n_odd, notes)

    def close(self) -> None:
        """Remove the scratch file and close the database; never raises."""
        with contextlib.suppress(OSError):
            self.scratch.unlink(missing_ok=True)
        with contextlib.suppress(duckdb.Error):
            self.db.close()


def rows_kept(rows: pa.Table, columns: Iterable[str] | None, run_id: str) -> pa.Table:
    """What the ingest keeps of rows of ``events`` of run ``run_id`` for a rank sink
    (:meth:`BatchInserter.keep_rank`): ``columns`` of them (None: all), the columns not copied,
    ``run_id`` as a dictionary of one value (``rows`` may lack it: the writer's buffered rows,
    :data:`BUFFERED_NAMES`)."""
    import pyarrow as pa

    if columns is None:
        if "run_id" in rows.column_names:
            return rows
        return rows.add_column(0, "run_id", pa.repeat(pa.scalar(run_id, pa.string()), len(rows)))
    want = list(columns)
    kept = rows.select([c for c in want if c != "run_id"])
    if "run_id" in want:
        ids = pa.DictionaryArray.from_arrays(
            pa.repeat(pa.scalar(0, pa.int32()), kept.num_rows), pa.array([run_id], pa.string())
        )
        kept = kept.add_column(want.index("run_id"), "run_id", ids)
    return kept


def _names_coded(table: pa.Table) -> pa.Table:
    """``table`` with its ``name`` column dictionary-encoded (values in order of first appearance):
    done on the parse threads, so the writer maps a batch's few distinct names to ids
    (:meth:`IdMap.ids_of`) instead of hashing every row's name."""
    import pyarrow.compute as pc

    at = table.schema.get_field_index("name")
    return table.set_column(at, "name", pc.dictionary_encode(table.column(at).combine_chunks()))


def sort_order(rows: pa.Table) -> pa.Array:
    """The stable order of ``rows`` by (rank, cat, ts_ns), nulls last: the same indices as
    ``pc.sort_indices`` on those columns, with ``cat`` (a few distinct strings) compared as the
    rank of its value among the distinct ones, an integer (a third cheaper than comparing
    strings row by row)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = [("rank", "ascending"), ("cat", "ascending"), ("ts_ns", "ascending")]
    cat = rows.column("cat")
    if cat.null_count:  # nulls sort last as strings; the integer key would need the same care
        return pc.sort_indices(rows, keys)
    coded = pc.dictionary_encode(cat).combine_chunks()
    by_value = pc.sort_indices(coded.dictionary).to_numpy()
    value_rank = np.empty(len(by_value), np.int32)
    value_rank[by_value] = np.arange(len(by_value), dtype=np.int32)
    cat_key = pc.take(pa.array(value_rank), coded.indices)
    key = pa.table({"rank": rows.column("rank"), "cat": cat_key, "ts_ns": rows.column("ts_ns")})
    return pc.sort_indices(key, keys)


def _extent(path: Path, table: pa.Table) -> tuple[int, int | None, int | None]:
    """(events with a duration (ph X), min ts_ns, max ts_ns + dur_ns) of a parsed batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    timed = pc.sum(pc.equal(table.column("ph"), "X")).as_py() or 0
    ts = table.column("ts_ns")
    lo = pc.min(ts).as_py()
    try:
        hi = pc.max(pc.add_checked(ts, pc.fill_null(table.column("dur_ns"), 0))).as_py()
    except pa.ArrowInvalid:
        raise IngestError(
            path, "an event's ts + dur is beyond the range of ns timestamps"
        ) from None
    return int(timed), lo, hi


class RunIdOnItsWay(Protocol):
    """A run's id being found on other threads (:class:`gpuscope.ingest.loader.PendingRunId`)."""

    def done(self) -> bool:
        """Whether :meth:`result` answers without waiting."""
        ...

    def result(self) -> str:
        """The id (waits for it); raises what finding it raised (a duplicate run, ...)."""
        ...


class BatchInserter:
    """Writes the events of one run; :meth:`finish` writes its names and thread labels.

    Events are buffered (Arrow) and reach ``events`` in chunks of :data:`FLUSH_ROWS`
    (``$GPUSCOPE_FLUSH_ROWS``),
    sorted by (rank, cat, ts_ns): a Parquet file per chunk (:meth:`_write`), and sorted chunks
    let a query skip most of a file by its min/max statistics.

    A chunk is sorted by the caller while the chunk before is written on a thread of its own (the
    *flush* thread), and written there while the caller maps the next batches: the connection is
    then the flush thread's until :meth:`settle`, which
    every other use of it waits for (this class's own, and the caller's: call :meth:`settle`
    before using the connection between inserts).

    ``run_id`` may be on its way (:class:`RunIdOnItsWay`): batches are then mapped and their
    chunks sorted as usual, and the chunks are held (up to :data:`MAX_UNNAMED_BYTES`) until it is
    known; nothing reaches the store before it is (:attr:`run_id`).
    """

    def __init__(self, con: Any, run_id: str | RunIdOnItsWay) -> None:
        self.con = con
        self._run_id = run_id if isinstance(run_id, str) else None
        self._on_its_way = None if isinstance(run_id, str) else run_id
        self._unwritten: list[pa.Table] = []  # sorted chunks not handed to the flush thread yet
        self._unwritten_bytes = 0
        self.parser: BatchParser | None = None  # for insert(): made on first use
        self.buffer: list[pa.Table] = []  # converted batches not yet written
        self.buffered = 0
        self.flush_rows = positive_int(ENV_FLUSH_ROWS, FLUSH_ROWS)
        self.stats: dict[int, RankStats] = {}
        self.fallbacks = 0
        self.names = IdMap()  # event names -> names.name_id
        self.labels = IdMap()  # non-numeric pids/tids -> -1 - id
        self.thread_rows: set[tuple[int, str, int, str]] = set()
        self.odd_events = 0  # events with a value of an unexpected type (kept as JSON text)
        self.odd_examples: list[str] = []
        self.memory_rows: list[tuple[Any, ...]] = []  # memory_events rows not yet written
        # a rank's rows kept for its sink (:meth:`keep_rank`): rank -> its tables, None once over
        self.kept: dict[int, list[pa.Table] | None] = {}
        self.kept_n: dict[int, int] = {}
        self.keep_limit = 0
        self.keep_columns: tuple[str, ...] | None = None  # the kept rows' columns (None: all)
        self._flusher: ThreadPoolExecutor | None = None  # made on the first flush
        self._pending: Future[None] | None = None  # the chunks being written
        # where the flush thread writes events files with pyarrow (None: DuckDB's INSERT), and
        # the most rows a chunk written by the INSERT instead may have (:func:`inlined_rows`)
        self.parquet_folder = _pyarrow_folder(con)
        self.inlined_rows = inlined_rows(con) if self.parquet_folder is not None else 0

    @property
    def run_id(self) -> str:
        """The run's id; waits for it when it is on its way, raising what finding it raises
        (:class:`~gpuscope.ingest.errors.DuplicateRunError`: nothing was written)."""
        if self._run_id is None:
            assert self._on_its_way is not None
            self._run_id = self._on_its_way.result()
            self._on_its_way = None
        return self._run_id

    def run_id_known(self) -> bool:
        """Whether :attr:`run_id` answers without waiting."""
        return self._run_id is not None or (
            self._on_its_way is not None and self._on_its_way.done()
        )

    def insert(self, path: Path, batch: Batch, rank: int, *, strict: bool = True) -> int:
        """Parse and insert one batch (in this thread); returns its number of events. Raises
        IngestError for bad events. ``strict``: as :meth:`BatchParser.parse`'s."""
        if self.parser is None:
            self.parser = BatchParser()
        parsed = self.parser.parse(path, batch, strict=strict)
        return self.insert_parsed(parsed, rank, parsed.memory_data(batch.data))

    def odd_warning(self) -> str | None:
        """One line on the values kept as JSON text because their type was unexpected (None: none)."""
        if not self.odd_events:
            return None
        ex = "; ".join(self.odd_examples[:3])
        return (
            f"{self.odd_events} events had values of unexpected types, kept as JSON text in "
            f"events.odd_args (e.g. {ex})"
        )

    def insert_parsed(self, parsed: Parsed, rank: int, memory_data: bytes | None = None) -> int:
        """Insert one parsed batch (:meth:`BatchParser.parse`, in any thread) as rank ``rank``:
        map names and non-numeric ids to integers (vectorised), then buffer its rows. Batches
        must come in file order (ids are given in order of first appearance). ``memory_data``:
        the batch's JSON when it holds allocator events (``memory_events``). Returns its events."""
        import pyarrow as pa
        import pyarrow.compute as pc

        raise_if_stopping()  # a stop whose exception was lost on its way ends the ingest here
        if memory_data is not None:  # profile_memory's [memory] instants: their own table
            from gpuscope.ingest.memory_events import memory_rows

            self.memory_rows += memory_rows(memory_data, self.run_id, rank)
        if parsed.fallback:
            self.fallbacks += 1
        if parsed.odd_events:
            self.odd_events += parsed.odd_events
            if len(self.odd_examples) < 3:
                self.odd_examples += parsed.odd_examples
        raw = parsed.table
        n = raw.num_rows
        name = raw.column("name")
        if name.null_count:  # a name's NULL is "" (a dictionary without nulls is mapped as it is)
            name = pc.fill_null(name.cast(pa.string()), "")
        name_id = self.names.ids_of(name)
        pid = self._ids(raw, "pid", rank)
        tid = self._ids(raw, "tid", rank)
        if pc.any(pc.equal(raw.column("ph"), "M")).as_py():
            self._metadata_labels(raw, pid, tid, rank)
        filled = {  # run_id: written by each chunk's INSERT (BUFFERED_NAMES)
            "rank": pa.repeat(pa.scalar(rank, pa.int32()), n),
            "name_id": name_id,
            "pid": pid,
            "tid": tid,
        }
        schema = raw.schema
        columns = []
        for name in BUFFERED_NAMES:
            col = filled.get(name)
            if col is None:
                columns.append(raw.column(name))
            else:
                columns.append(pc.cast(col, schema.field(name).type))
        rows = pa.Table.from_arrays(columns, names=list(BUFFERED_NAMES))
        self.stats.setdefault(rank, RankStats()).add(
            n, parsed.n_timed, parsed.ts_min, parsed.ts_max
        )
        self.buffer.append(rows)
        self.buffered += n
        kept = self.kept.get(rank)
        if kept is not None:
            self.kept_n[rank] += n
            if self.kept_n[rank] > self.keep_limit:
                self.kept[rank] = None  # too big to keep: its summary is computed from the store
            else:
                kept.append(self._kept_of(rows))
        if self.buffered >= self.flush_rows:
            self._flush(wait_for_id=False)
        return n

    def flush(self) -> None:
        """Sort the buffered events by (rank, cat, ts_ns) here, while the flush thread writes the
        chunk before, then hand them to the flush thread (waiting for the run's id first when it
        is on its way). The buffer is Arrow, outside DuckDB: rows a transaction writes to a
        DuckDB table and deletes again stay in its memory until the commit."""
        self._flush(wait_for_id=True)

    def _flush(self, *, wait_for_id: bool) -> None:
        if self.buffered:
            chunk = self._sorted_chunk()
            self._unwritten.append(chunk)
            if self._run_id is None:
                self._unwritten_bytes += chunk.nbytes
        if not (wait_for_id or self._unwritten_bytes > MAX_UNNAMED_BYTES or self.run_id_known()):
            return  # held until the run's id is known
        self.run_id  # noqa: B018 - waits for the id: nothing is written before it is known
        self.settle()
        self._flush_memory()
        if not self._unwritten:
            return
        if self._flusher is None:
            self._flusher = ThreadPoolExecutor(1, thread_name_prefix="gpuscope-flush")
        chunks, self._unwritten, self._unwritten_bytes = self._unwritten, [], 0
        self._pending = self._flusher.submit(self._write_in_turn, chunks)

    def _write_in_turn(self, chunks: list[pa.Table]) -> None:
        """Sorted chunks into ``events``, one INSERT each, in order (on the flush thread; the
        first that fails ends it)."""
        for chunk in chunks:
            self._write(chunk)

    def _sorted_chunk(self) -> pa.Table:
        """The buffer as one table sorted by (rank, cat, ts_ns); the buffer is emptied. Sorted in
        Arrow, not by the INSERT: DuckDB's sort holds the chunk again, in its own row format,
        beside the Parquet writer's buffers."""
        import pyarrow as pa

        # one chunk per column: a take over one chunk is ~35 % cheaper than over the batches'
        chunk = pa.concat_tables(self.buffer).combine_chunks()
        self.buffer, self.buffered = [], 0
        return chunk.take(sort_order(chunk))

    def _write(self, _gs_chunk: pa.Table) -> None:
        """One sorted chunk (:data:`BUFFERED_NAMES`) into ``events``, the run's id beside each
        row (on the flush thread): a Parquet file of pyarrow's in the lake's folder of ``events``
        (:attr:`parquet_folder`), registered in the transaction, else DuckDB's INSERT."""
        raw_con = getattr(self.con, "con", self.con)
        folder = self.parquet_folder
        if (
            folder is not None
            and _gs_chunk.num_rows > self.inlined_rows
            and not any(_gs_chunk[c].null_count for c in NOT_NULL_COLUMNS)
        ):
            write_events_file(raw_con, folder, _gs_chunk, self.run_id)
            return
        # A replacement scan of the local variable, not a registered view: nothing of it is kept
        # in the transaction once the INSERT is done. The id is a literal, not a parameter (a
        # bound parameter makes DuckDB import pandas, ~0.4 s).
        run_id = "'" + self.run_id.replace("'", "''") + "'"
        raw_con.execute(f"INSERT INTO events SELECT CAST({run_id} AS VARCHAR), * FROM _gs_chunk")

    def settle(self) -> None:
        """Wait until the chunks being written are in ``events`` (raises what writing them
        raised); the connection is the caller's again."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _flush_memory(self) -> None:
        """Write the buffered ``memory_events`` rows (one INSERT)."""
        self.settle()
        if not self.memory_rows:
            return
        from gpuscope.ingest.memory_events import memory_table

        _gs_mem = memory_table(self.memory_rows)
        self.memory_rows = []
        raw_con = getattr(self.con, "con", self.con)
        raw_con.execute("INSERT INTO memory_events SELECT * FROM _gs_mem ORDER BY rank, ts_ns")

    def keep_rank(self, rank: int, limit: int, columns: Iterable[str] | None = None) -> None:
        """Keep the rows of ``rank`` inserted from now on, up to ``limit`` events (for
        :meth:`kept_rows`): their ``columns`` only (None: every column of ``events``), and
        ``run_id``, one value, as a dictionary (4 bytes a row, not the id's 12 and more)."""
        self.kept[rank], self.kept_n[rank], self.keep_limit = [], 0, int(limit)
        self.keep_columns = tuple(columns) if columns is not None else None

    def _kept_of(self, rows: pa.Table) -> pa.Table:
        return rows_kept(rows, self.keep_columns, self.run_id)

    def kept_rows(self, rank: int) -> pa.Table | None:
        """The rows of ``rank`` kept since :meth:`keep_rank` (None: over the limit, or not kept);
        forgets them."""
        import pyarrow as pa

        tables = self.kept.pop(rank, None)
        self.kept_n.pop(rank, None)
        return None if tables is None else pa.concat_tables(tables) if tables else None

    def rename_rank(self, old: int, new: int) -> None:
        """Events written as rank ``old`` become rank ``new`` (the rank was learned late)."""
        self.kept.pop(old, None)  # kept rows say ``old``: that rank's summary comes from the store
        self.kept_n.pop(old, None)
        self.flush()
        self.settle()
        for table in ("events", "memory_events"):
            self.con.execute(
                f"UPDATE {table} SET rank = ? WHERE run_id = ? AND rank = ?",
                [new, self.run_id, old],
            )
        if old in self.stats:
            self.stats[new] = self.stats.pop(old)
        self.thread_rows = {(new, *r[1:]) if r[0] == old else r for r in self.thread_rows}

    def _ids(self, raw: pa.Table, kind: str, rank: int) -> pa.Array:
        """Numeric pid/tid as is; a non-numeric one gets a stable negative id (label kept in `threads`)."""
        import pyarrow.compute as pc

        num = raw.column(f"{kind}_num")
        label = raw.column(f"{kind}_label")
        if label.null_count == len(label):
            return num
        ids = pc.negate(pc.add(self.labels.ids_of(label), 1))
        for text in pc.unique(label).to_pylist():
            if text is not None:
                self.thread_rows.add((rank, kind, -1 - self.labels.ids[text], text))
        return pc.coalesce(num, ids)

    def _metadata_labels(self, raw: pa.Table, pid: pa.Array, tid: pa.Array, rank: int) -> None:
        import pyarrow.compute as pc

        mask = pc.equal(raw.column("ph"), "M")
        meta = raw.filter(mask).select(["name", "meta_name"]).to_pylist()
        pids = pc.filter(pid, mask).to_pylist()
        tids = pc.filter(tid, mask).to_pylist()
        for row, p, t in zip(meta, pids, tids, strict=True):
            if row["meta_name"] is None:
                continue
            if row["name"] == "process_name" and p is not None:
                self.thread_rows.add((rank, "pid", p, row["meta_name"]))
            elif row["name"] == "thread_name" and t is not None:
                self.thread_rows.add((rank, "tid", t, row["meta_name"]))

    def rank_stats(self, rank: int) -> RankStats:
        """Everything inserted for ``rank`` so far (buffered rows included: the ranks of a run
        share the buffer, so small rank files make full-size Parquet files)."""
        return self.stats.get(rank, RankStats())

    def finish(self) -> None:
        import pyarrow as pa

        self.flush()
        self.settle()
        c = self.con
        fresh = {n: i for n, i in self.names.ids.items() if i not in self.names.seeded}
        names = pa.table({
            "run_id": pa.array([self.run_id] * len(fresh), pa.string()),
            "name_id": pa.array(list(fresh.values()), pa.int32()),
            "name": pa.array(list(fresh), pa.string()),
        })  # fmt: skip
        c.register("_gs_names", names)
        try:
            c.execute("INSERT INTO names SELECT * FROM _gs_names")
        finally:
            c.unregister("_gs_names")
        rows = sorted((self.run_id, *r) for r in self.thread_rows)
        if rows:  # one INSERT (executemany is one per row: on a lake, a file each)
            c.execute(
                "INSERT INTO threads VALUES " + ", ".join(["(?, ?, ?, ?, ?)"] * len(rows)),
                [v for row in rows for v in row],
            )
        self.close()

    def close(self) -> None:
        """Wait for the flush thread and stop it, remove the scratch file and the buffer; never
        raises (it also runs while an error is on its way, before the transaction rolls back:
        the flush thread must be done with the connection by then)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            # whatever writing the chunk raised: the ingest is failing already, or finish()
            # (which settles) was not reached and this error is not the first
            with contextlib.suppress(Exception):
                pending.result()
        if self._flusher is not None:
            self._flusher.shutdown(wait=True)
            self._flusher = None
        if self.parser is not None:
            self.parser.close()
            self.parser = None
        self.buffer = []
        self._unwritten, self._unwritten_bytes = [], 0
        self.kept = {}


def _pyarrow_folder(con: Any) -> Path | None:
    """Where the flush writes ``events`` files with pyarrow: the lake's folder of ``events`` on a
    local store (:meth:`~gpuscope.store.Store.local_table_folder`), unless
    ``$GPUSCOPE_PARQUET_WRITER`` is ``duckdb``; None: DuckDB's INSERT writes them."""
    writer = os.environ.get(ENV_PARQUET_WRITER, "pyarrow").strip().lower()
    if writer not in ("pyarrow", "duckdb", ""):
        raise ValueError(f"{ENV_PARQUET_WRITER}={writer!r} must be pyarrow or duckdb")
    folder = getattr(con, "local_table_folder", None)
    if writer == "duckdb" or folder is None or not getattr(con, "is_lake", False):
        return None
    encrypted = con.execute(
        f"SELECT value FROM {LAKE}.options() WHERE option_name = 'encrypted'"
    ).fetchall()
    if any(v.lower() == "true" for (v,) in encrypted):
        return None  # DuckLake encrypts the files it writes; pyarrow's would not be
    return folder("events")  # type: ignore[no-any-return]


def inlined_rows(con: Any) -> int:
    """The most rows DuckLake keeps in its catalog rather than in a file (data inlining: the
    lake's ``data_inlining_row_limit`` option for ``events``, else the session's default), which
    the INSERT writes there: a file of so few rows, once its run is deleted, would stay on disk
    (DuckLake inlines a deletion of that few rows instead of retiring the file)."""
    raw = getattr(con, "con", con)
    ((default,),) = raw.execute(
        "SELECT current_setting('ducklake_default_data_inlining_row_limit')"
    ).fetchall()
    set_here = raw.execute(
        f"SELECT value FROM {LAKE}.options() WHERE option_name = 'data_inlining_row_limit'"
    ).fetchall()
    return max([int(default), *(int(v) for (v,) in set_here)])


def events_file_table(chunk: pa.Table, run_id: str) -> pa.Table:
    """A sorted chunk (:data:`BUFFERED_NAMES`) as the rows of an ``events`` Parquet file: the
    run's id first (a dictionary of one value), the JSON columns typed as JSON (their text was
    checked as JSON by the parse: DuckDB's INSERT checked it again)."""
    import pyarrow as pa

    ids = pa.DictionaryArray.from_arrays(
        pa.repeat(pa.scalar(0, pa.int32()), chunk.num_rows), pa.array([run_id], pa.string())
    )
    columns, names = [ids], ["run_id"]
    for name, column in zip(chunk.column_names, chunk.columns, strict=True):
        if name in JSON_COLUMNS:
            column = pa.chunked_array(
                [pa.ExtensionArray.from_storage(pa.json_(), c) for c in column.chunks],
                pa.json_(),
            )
        columns.append(column)
        names.append(name)
    return pa.Table.from_arrays(columns, names=names)


def write_events_file(con: Any, folder: Path, chunk: pa.Table, run_id: str) -> Path:
    """Write ``chunk`` (:func:`events_file_table`) as one Parquet file in ``folder`` (the lake's
    folder of ``events``) and register it in ``events`` in the connection's transaction. A
    failure leaves at most an untracked file in the data path, which the rolled-back write's
    cleanup deletes (:meth:`~gpuscope.store.Store.delete_orphaned_files`), as DuckLake's own.

    The OS refusing the file (disk full, the file-size limit, a read-only disk) is raised as
    DuckDB's INSERT raised it: a ``duckdb.IOException`` naming the file, a fault of the store
    (``store_fault``: "<store>: the disk holding the store is full: ..."). pyarrow's own OSError
    names no file, which would read as a fault of "a temporary file"."""
    import uuid

    import pyarrow.parquet as pq

    path = folder / f"{FILE_PREFIX}{uuid.uuid4().hex}.parquet"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            events_file_table(chunk, run_id),
            path,
            compression="snappy",  # DuckLake's default codec, as the INSERT writes
            use_dictionary=list(DICTIONARY_COLUMNS),
            store_schema=False,  # no Arrow schema in the footer: DuckLake reads the Parquet types
        )
    except OSError as e:
        with contextlib.suppress(OSError):  # pyarrow removes its partial file; make sure
            path.unlink(missing_ok=True)
        reason = os.strerror(e.errno) if e.errno else str(e).strip() or type(e).__name__
        raise duckdb.IOException(f'Could not write file "{path}": {reason}') from e
    text = "'" + str(path).replace("'", "''") + "'"
    con.execute(f"CALL ducklake_add_data_files('{LAKE}', 'events', {text})")
    return path


SCRATCH_PREFIX = (
    "gpuscope-batch-"  # + the writer's pid + "-" + random + ".json", in the temp folder
)


def remove_own_scratch(folder: str | None = None) -> None:
    """Delete this process's scratch batch files (at the end of a command); never raises."""
    own = f"{SCRATCH_PREFIX}{os.getpid()}-"
    with contextlib.suppress(OSError):
        for p in Path(folder or tempfile.gettempdir()).glob(f"{own}*.json"):
            with contextlib.suppress(OSError):
                p.unlink()


def sweep_scratch(folder: str | None = None) -> list[Path]:
    """Delete scratch batch files left by killed ingests (their process is gone); returns them."""
    removed = []
    for p in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*.json"):
        pid_text = p.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if pid_text.isdigit():
            if int(pid_text) == os.getpid() or pid_alive(int(pid_text)):
                continue
        else:  # no pid in the name (older gpuscope): stale when not written for an hour
            try:
                if time.time() - p.stat().st_mtime < 3600:
                    continue
            except OSError:
                continue
        with contextlib.suppress(OSError):
            p.unlink()
            removed.append(p)
    return removed


class IdMap:
    """Dense integer ids for strings, in order of first appearance; lookups are vectorised."""

    def __init__(self) -> None:
        import pyarrow as pa

        self.ids: dict[str, int] = {}
        self._values = pa.array([], pa.string())
        self._ids_arr = pa.array([], pa.int32())
        self.next_id = 0
        self.seeded: set[int] = (
            set()
        )  # ids stored before (a job's earlier nodes): not written again

    def seed(self, known: dict[str, int]) -> None:
        """Start from ids stored already (string -> id); new strings get ids above them."""
        import pyarrow as pa

        self.ids = dict(known)
        self.seeded = set(known.values())
        self.next_id = max(known.values(), default=-1) + 1
        self._values = pa.array(list(self.ids), pa.string())
        self._ids_arr = pa.array(list(self.ids.values()), pa.int32())

    def table(self, run_id: str) -> pa.Table:
        """Every string so far as rows of ``names`` (run_id, name_id, name)."""
        import pyarrow as pa

        return pa.table({
            "run_id": pa.array([run_id] * len(self.ids), pa.string()),
            "name_id": pa.array(list(self.ids.values()), pa.int32()),
            "name": pa.array(list(self.ids), pa.string()),
        })  # fmt: skip

    def ids_of(self, strings: pa.Array | pa.ChunkedArray) -> pa.Array:
        """int32 ids for a string array, plain or dictionary-encoded (NULL stays NULL); new
        strings are given the next ids, in order of first appearance."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(strings, pa.ChunkedArray) and strings.num_chunks == 1:
            strings = strings.chunk(0)
        if pa.types.is_dictionary(strings.type):
            if isinstance(strings, pa.DictionaryArray) and not strings.null_count:
                return self._ids_of_coded(strings)
            strings = strings.cast(strings.type.value_type)

        new = [s for s in pc.unique(strings).to_pylist() if s is not None and s not in self.ids]
        if new:
            self._add(new)
        index = pc.index_in(strings, value_set=self._values)
        if not self.seeded:  # ids are positions (0, 1, 2, ...)
            return index
        return pc.take(self._ids_arr, index)

    def _add(self, new: list[str]) -> None:
        """Give each of ``new`` (values not yet known, in order of first appearance) the next id,
        and remake the lookup arrays."""
        import pyarrow as pa

        for s in new:
            self.ids[s] = self.next_id
            self.next_id += 1
        self._values = pa.array(list(self.ids), pa.string())
        if self.seeded:
            self._ids_arr = pa.array(list(self.ids.values()), pa.int32())

    def _ids_of_coded(self, coded: pa.DictionaryArray) -> pa.Array:
        """:meth:`ids_of` of a dictionary array without nulls whose dictionary holds each value
        once, in order of first appearance (``pc.dictionary_encode``'s): a Python lookup per
        distinct value, then one take."""
        import pyarrow as pa
        import pyarrow.compute as pc

        values = coded.dictionary.to_pylist()
        new = [s for s in values if s not in self.ids]
        if new:
            self._add(new)
        ids = pa.array([self.ids[s] for s in values], pa.int32())
        return pc.take(ids, coded.indices)
