"""Insert batches of trace events into the store, in SQL.

Fast path: DuckDB's own JSON reader parses a batch (a JSON array of whole events, cut out of the
file by :mod:`gpuscope.ingest.json_stream`) into the typed *raw* layout (Arrow). When a batch is not
strict JSON or DuckDB refuses it (raw control characters inside strings, a wrong type...), it goes
through the msgspec decoder in :mod:`gpuscope.ingest.kineto` instead, which accepts the known quirks and
otherwise names the offending event. Both paths end in the same code that maps names (stored once per
run) and non-numeric pids/tids to integers, so they write identical rows.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from gpuscope.ingest.env import positive_int
from gpuscope.store import pid_alive
from gpuscope.store.schema import EVENTS

# pyarrow, msgspec and the decoder are imported where they are used: every ``gpuscope`` command
# imports this module (for :func:`remove_own_scratch`), and only an ingest needs them (0.2 s).
if TYPE_CHECKING:
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
# sets it (fewer rows: less memory, more files).
ENV_FLUSH_ROWS = "GPUSCOPE_FLUSH_ROWS"
FLUSH_ROWS = 100_000
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


class BatchInserter:
    """Writes the events of one run; :meth:`finish` writes its names and thread labels.

    Events are buffered (Arrow) and reach ``events`` in chunks of :data:`FLUSH_ROWS`
    (``$GPUSCOPE_FLUSH_ROWS``),
    sorted by (rank, cat, ts_ns): a DuckLake writes a Parquet file per INSERT, and sorted chunks
    let a query skip most of a file by its min/max statistics.
    """

    def __init__(self, con: Any, run_id: str) -> None:
        self.con, self.run_id = con, run_id
        sweep_scratch()
        fd, name = tempfile.mkstemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", suffix=".json")
        os.close(fd)
        self.scratch = Path(name)
        raw_con = getattr(con, "con", con)  # a Store's DuckDB connection
        self.reader = raw_con.cursor()
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

    def insert(self, path: Path, batch: Batch, rank: int, *, strict: bool = True) -> int:
        """Insert one batch; returns its number of events. Raises IngestError for bad events.

        ``strict``: the batch passed :func:`strict_json`; otherwise it goes straight to the decoder
        that reads the known quirks and names anything else.
        """
        if MEMORY_MARK in batch.data:  # profile_memory's [memory] instants: their own table
            from gpuscope.ingest.memory_events import memory_rows

            self.memory_rows += memory_rows(batch.data, self.run_id, rank)
        if not strict:
            self.fallbacks += 1
            return self.insert_arrow(self._decode(path, batch), rank)
        self.scratch.write_bytes(batch.data)
        # The reader's buffers follow maximum_object_size: the batch's own size keeps them (and the
        # ingest's memory limit) small; a batch is whole events, so no object is bigger.
        sql = RAW_FROM_JSON.format(
            path=str(self.scratch).replace("'", "''"),
            columns=COLUMNS,
            max_bytes=max(len(batch.data) + 1024, 1 << 20),
        )
        try:  # on a cursor of its own: a refused batch must not abort the writer's transaction
            raw = self.reader.execute(sql).to_arrow_table()
        except duckdb.Error:
            self.fallbacks += 1
            raw = self._decode(
                path, batch
            )  # reads the quirk or the odd types, or names the bad JSON
        return self.insert_arrow(raw, rank)

    def _decode(self, path: Path, batch: Batch) -> pa.Table:
        from gpuscope.ingest.kineto import decode_batch, odd_notes, to_raw

        events = decode_batch(path, batch)
        n_odd = sum(1 for e in events if getattr(e, "odd", None))
        if n_odd:
            self.odd_events += n_odd
            if len(self.odd_examples) < 3:
                self.odd_examples += odd_notes(path, events, batch.first_index)
        return to_raw(events)

    def odd_warning(self) -> str | None:
        """One line on the values kept as JSON text because their type was unexpected (None: none)."""
        if not self.odd_events:
            return None
        ex = "; ".join(self.odd_examples[:3])
        return (
            f"{self.odd_events} events had values of unexpected types, kept as JSON text in "
            f"events.odd_args (e.g. {ex})"
        )

    def insert_arrow(self, raw: pa.Table, rank: int) -> int:
        """Map names and non-numeric ids to integers (vectorised), then one INSERT."""
        import pyarrow.compute as pc

        names = pc.fill_null(raw.column("name"), "")
        name_id = self.names.ids_of(names)
        pid = self._ids(raw, "pid", rank)
        tid = self._ids(raw, "tid", rank)
        if pc.any(pc.equal(raw.column("ph"), "M")).as_py():
            self._metadata_labels(raw, pid, tid, rank)
        table = (
            raw.append_column("name_id", name_id)
            .append_column("pid", pid)
            .append_column("tid", tid)
        )
        # On the reader's cursor, outside the run's transaction: a table registered inside it
        # stays referenced (and in memory) until the transaction ends.
        self.reader.register("_gs_raw", table)  # scanned in place, no copy
        try:
            rows = self.reader.execute(TO_EVENTS, [self.run_id, rank]).to_arrow_table()
        finally:
            self.reader.unregister("_gs_raw")
        self.buffer.append(rows)
        self.buffered += rows.num_rows
        if self.buffered >= self.flush_rows:
            self.flush()
        return raw.num_rows

    def flush(self) -> None:
        """Write the buffered events to ``events``, sorted by (rank, cat, ts_ns), counting them
        per rank. The buffer is Arrow, outside DuckDB: rows a transaction writes to a DuckDB table
        and deletes again stay in its memory until the commit."""
        self._flush_memory()
        if not self.buffered:
            return
        import pyarrow as pa

        chunk = pa.concat_tables(self.buffer)
        self.buffer = []
        self.buffered = 0
        _gs_chunk = chunk
        del chunk
        self.reader.register("_gs_chunk", _gs_chunk)
        try:
            for rank, n, timed, lo, hi in self.reader.execute(
                "SELECT rank, count(*), count(*) FILTER (WHERE ph = 'X'), min(ts_ns), "
                "max(ts_ns + coalesce(dur_ns, 0)) FROM _gs_chunk GROUP BY rank"
            ).fetchall():
                self.stats.setdefault(int(rank), RankStats()).add(int(n), int(timed), lo, hi)
        finally:
            self.reader.unregister("_gs_chunk")
        # A replacement scan of the local variable, not a registered view: nothing of it is kept
        # in the transaction once the INSERT is done.
        raw_con = getattr(self.con, "con", self.con)
        raw_con.execute("INSERT INTO events SELECT * FROM _gs_chunk ORDER BY rank, cat, ts_ns")

    def _flush_memory(self) -> None:
        """Write the buffered ``memory_events`` rows (one INSERT)."""
        if not self.memory_rows:
            return
        from gpuscope.ingest.memory_events import memory_table

        _gs_mem = memory_table(self.memory_rows)
        self.memory_rows = []
        raw_con = getattr(self.con, "con", self.con)
        raw_con.execute("INSERT INTO memory_events SELECT * FROM _gs_mem ORDER BY rank, ts_ns")

    def rename_rank(self, old: int, new: int) -> None:
        """Events written as rank ``old`` become rank ``new`` (the rank was learned late)."""
        self.flush()
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
        """Everything written for ``rank`` (flushes the buffer first)."""
        self.flush()
        return self.stats.get(rank, RankStats())

    def finish(self) -> None:
        import pyarrow as pa

        self.flush()
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
        if rows:
            c.executemany("INSERT INTO threads VALUES (?, ?, ?, ?, ?)", rows)
        self.close()

    def close(self) -> None:
        """Remove the scratch file and the buffer; never raises (it also runs while an error is on
        its way)."""
        with contextlib.suppress(OSError):
            self.scratch.unlink(missing_ok=True)
        with contextlib.suppress(duckdb.Error):
            self.reader.close()
        self.buffer = []


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

    def ids_of(self, strings: pa.Array | pa.ChunkedArray) -> pa.Array:
        """int32 ids for a string array (NULL stays NULL); new strings are given the next ids."""
        import pyarrow as pa
        import pyarrow.compute as pc

        new = [s for s in pc.unique(strings).to_pylist() if s is not None and s not in self.ids]
        if new:
            for s in new:
                self.ids[s] = self.next_id
                self.next_id += 1
            self._values = pa.array(list(self.ids), pa.string())
            if self.seeded:
                self._ids_arr = pa.array(list(self.ids.values()), pa.int32())
        index = pc.index_in(strings, value_set=self._values)
        if not self.seeded:  # ids are positions (0, 1, 2, ...)
            return index
        return pc.take(self._ids_arr, index)
