"""The tables gpuscope writes (in a DuckLake, or a plain DuckDB file). docs/schema.md is generated from this module
(``python -m gpuscope.store.schema > docs/schema.md``) and a test keeps the two in step.

Times: ``ts_ns``/``dur_ns`` are integers in nanoseconds, exactly the trace's microsecond values × 1000
(no rounding to µs). Absolute (Unix epoch) time of an event = ``ranks.time_offset_ns + ts_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.vocabulary import nvml_fields as nf

SCHEMA_VERSION = 3  # 3: the store is a DuckLake; runs.uploaded_by; no ingest_pending


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()

    def ddl(self, *, keys: bool = True, catalog: str | None = None) -> str:
        """``CREATE TABLE IF NOT EXISTS``; ``keys=False`` leaves the primary key out (DuckLake has
        no keys or indexes: uniqueness is kept by the ingest, whose run ids are content hashes);
        ``catalog`` names the database it is created in (the lake's, see ``LAKE_SEARCH_PATH``)."""
        cols = [f"{c.name} {c.type}" for c in self.columns]
        if self.primary_key and keys:
            cols.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        name = f"{catalog}.{self.name}" if catalog else self.name
        return f"CREATE TABLE IF NOT EXISTS {name} (\n  " + ",\n  ".join(cols) + "\n)"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


C = Column

RUNS = Table(
    "runs",
    "One row per run: a trace (one file per rank) or a standalone NVML series.",
    (
        C(
            "run_id",
            "VARCHAR NOT NULL",
            "12 hex digits of SHA-256 over the input files' bytes, in rank order; the same files give the same id",
        ),
        C(
            "name",
            "VARCHAR NOT NULL",
            "display name (`--name`, else derived from the file or folder name)",
        ),
        C("kind", "VARCHAR NOT NULL", "`trace` or `nvml`"),
        C("created_at", "TIMESTAMP NOT NULL", "ingest time, UTC"),
        C("n_ranks", "INTEGER NOT NULL", "number of rank files"),
        C("n_events", "BIGINT NOT NULL", "rows in `events` (or `nvml_samples`) for this run"),
        C("source_bytes", "BIGINT NOT NULL", "input size on disk, bytes (compressed size for .gz)"),
        C(
            "gpu_name",
            "VARCHAR",
            "device name of rank 0's first GPU (`deviceProperties[0].name`), NULL if none",
        ),
        C("torch_version", "VARCHAR", "from the trace's metadata when present"),
        C("tags", "VARCHAR[] NOT NULL", "user tags"),
        C("start_ns", "BIGINT", "earliest event, absolute Unix time in ns"),
        C("end_ns", "BIGINT", "latest event end, absolute Unix time in ns"),
        C(
            "uploaded_by",
            "VARCHAR",
            "who stored the run (the signed-in user of the dashboard, or `--uploaded-by`); NULL when unknown",
        ),
    ),
    ("run_id",),
)

RUN_COLUMNS: tuple[str, ...] = tuple(RUNS.column_names)
"""The columns of ``runs``, in table order: what a run's row holds wherever it is read."""

RANKS = Table(
    "ranks",
    "One row per rank file of a trace run, with the trace-level metadata kept as JSON.",
    (
        C("run_id", "VARCHAR NOT NULL", "-> runs.run_id"),
        C(
            "rank",
            "INTEGER NOT NULL",
            "`distributedInfo.rank`, else from the file name, else 0 for a single file",
        ),
        C("path", "VARCHAR NOT NULL", "file the rank came from (as given)"),
        C("file_bytes", "BIGINT NOT NULL", "size on disk, bytes"),
        C("json_bytes", "BIGINT NOT NULL", "uncompressed JSON size, bytes"),
        C("sha256", "VARCHAR NOT NULL", "SHA-256 of the file's bytes"),
        C("base_time_ns", "BIGINT", "`baseTimeNanoseconds` when present"),
        C(
            "time_offset_ns",
            "BIGINT NOT NULL",
            "add to `ts_ns` for absolute Unix ns: `base_time_ns` when timestamps are relative to it, else 0",
        ),
        C("world_size", "INTEGER", "`distributedInfo.world_size`"),
        C("backend", "VARCHAR", "`distributedInfo.backend` (nccl, gloo, ...)"),
        C("device_properties", "JSON", "`deviceProperties` array as written by Kineto"),
        C("distributed_info", "JSON", "`distributedInfo` object"),
        C(
            "metadata",
            "JSON",
            "every other top-level key of the trace (schemaVersion, versions, record_shapes, with_flops, user metadata, ...)",
        ),
        C("n_events", "BIGINT NOT NULL", "events of this rank"),
        C("ts_min_ns", "BIGINT", "earliest event start (trace time, ns)"),
        C("ts_max_ns", "BIGINT", "latest event end (trace time, ns)"),
    ),
    ("run_id", "rank"),
)

NAMES = Table(
    "names",
    "Event names, stored once per run (kernel names can be kilobytes long and repeat millions of times).",
    (
        C("run_id", "VARCHAR NOT NULL", "-> runs.run_id"),
        C("name_id", "INTEGER NOT NULL", "referenced by events.name_id"),
        C("name", "VARCHAR NOT NULL", "the name exactly as in the trace (control characters kept)"),
    ),
    ("run_id", "name_id"),
)

EVENTS = Table(
    "events",
    "Every trace event of every rank, typed. Which columns are set depends on `cat`/`ph`.",
    (
        C("run_id", "VARCHAR NOT NULL", "-> runs.run_id"),
        C("rank", "INTEGER NOT NULL", "-> ranks.rank"),
        C(
            "ph",
            "VARCHAR NOT NULL",
            "chrome-trace phase: X (complete), i (instant), s/f (flow start/finish), M (metadata), ...",
        ),
        C(
            "cat",
            "VARCHAR NOT NULL",
            "category as written: kernel, gpu_memcpy, gpu_memset, cuda_runtime, cuda_driver, cpu_op, user_annotation, gpu_user_annotation, python_function, ac2g, fwdbwd, ... ('' when absent)",
        ),
        C("name_id", "INTEGER NOT NULL", "-> names.name_id"),
        C(
            "pid",
            "BIGINT",
            "process id; for GPU events the device index. Non-numeric pids get ids from `threads`",
        ),
        C(
            "tid",
            "BIGINT",
            "thread id; for GPU events the stream. Non-numeric tids get ids from `threads`",
        ),
        C("ts_ns", "BIGINT", "start, trace time in ns (= trace µs × 1000, exact)"),
        C("dur_ns", "BIGINT", "duration in ns; NULL when the event has none"),
        C(
            "correlation",
            "BIGINT",
            "`args.correlation`: links a runtime/driver call to the GPU activity it launched",
        ),
        C(
            "external_id",
            "BIGINT",
            "`args.External id`: links a CPU op to its runtime calls and kernels",
        ),
        C("device", "INTEGER", "`args.device` (GPU index) for GPU activity"),
        C("stream", "BIGINT", "`args.stream` for GPU activity"),
        C("flow_id", "BIGINT", "`id` of flow events (ph s/f), e.g. ac2g and fwdbwd"),
        C("grid", "INTEGER[]", "`args.grid` [x, y, z] of a kernel"),
        C("block", "INTEGER[]", "`args.block` [x, y, z] of a kernel"),
        C("registers", "INTEGER", "`args.registers per thread`"),
        C("shared_mem", "BIGINT", "`args.shared memory`, bytes"),
        C("bytes", "BIGINT", "`args.bytes` of a memcpy/memset"),
        C("input_dims", "JSON", "`args.Input Dims` of a CPU op (needs record_shapes)"),
        C("input_types", "JSON", "`args.Input type`"),
        C(
            "concrete_inputs",
            "JSON",
            "`args.Concrete Inputs` (scalars such as alpha, stride, transposition flags)",
        ),
        C("flops", "DOUBLE", "`args.flops` when the trace was recorded with with_flops"),
        C("seq_num", "BIGINT", "`args.Sequence number`: links a forward op to its backward"),
        C("fwd_tid", "BIGINT", "`args.Fwd thread id`"),
        C("python_id", "BIGINT", "`args.Python id` of a python_function event"),
        C("python_parent_id", "BIGINT", "`args.Python parent id`"),
        C(
            "odd_args",
            "JSON",
            "the kept `args` whose value had an unexpected type (or `args` itself when not an object), "
            "by trace key, e.g. "
            '`{"grid": "grid(100,)"}` (Inductor launch ops of older PyTorch); NULL when none',
        ),
    ),
)

THREADS = Table(
    "threads",
    "Process and thread labels: `process_name`/`thread_name` metadata events, and the text of non-numeric pids/tids.",
    (
        C("run_id", "VARCHAR NOT NULL", "-> runs.run_id"),
        C("rank", "INTEGER NOT NULL", "-> ranks.rank"),
        C("kind", "VARCHAR NOT NULL", "`pid` or `tid`"),
        C("id", "BIGINT NOT NULL", "the numeric id used in events.pid/tid"),
        C(
            "label",
            "VARCHAR NOT NULL",
            "the text: the metadata name, or the original non-numeric pid/tid",
        ),
    ),
)

NVML_SERIES = Table(
    "nvml_series",
    "One row per NVML series file (gpuscope sampler JSONL or nvidia-smi CSV) stored under a run: "
    "attached to a trace run (aligned by absolute time) or a run of its own (`runs.kind = 'nvml'`).",
    (
        C(
            "run_id",
            "VARCHAR NOT NULL",
            "-> runs.run_id: the trace run it is attached to, or its own run",
        ),
        C("series_id", "VARCHAR NOT NULL", "12 hex digits of SHA-256 of the file's bytes"),
        C("path", "VARCHAR NOT NULL", "file the series came from"),
        C("format", "VARCHAR NOT NULL", "`gpuscope-jsonl` or `nvidia-smi-csv`"),
        C("host", "VARCHAR", "host name when the file records it"),
        C("interval_ms", "DOUBLE", "median sampling interval, ms"),
        C("n_samples", "BIGINT NOT NULL", "rows in nvml_samples"),
        C("start_ns", "BIGINT", "first sample, absolute Unix ns"),
        C("end_ns", "BIGINT", "last sample, absolute Unix ns"),
    ),
    ("run_id", "series_id"),
)

NVML_SAMPLES = Table(
    "nvml_samples",
    "NVML readings, one row per GPU per sample. NULL means the GPU or the source does not report the field (N/A).",
    (
        C("run_id", "VARCHAR NOT NULL", "-> runs.run_id"),
        C("series_id", "VARCHAR NOT NULL", "-> nvml_series.series_id"),
        C("gpu", "INTEGER NOT NULL", "NVML device index"),
        C("gpu_uuid", "VARCHAR", "NVML UUID when known"),
        C("gpu_name", "VARCHAR", "device name"),
        C("t_ns", "BIGINT NOT NULL", "sample time, absolute Unix ns"),
        C(
            nf.GPU_UTIL_PCT,
            "DOUBLE",
            "NVML utilization.gpu: % of the last sample period in which any kernel ran",
        ),
        C(
            nf.MEM_UTIL_PCT,
            "DOUBLE",
            "NVML utilization.memory: % of the period the memory controller was busy",
        ),
        C(nf.MEM_USED_BYTES, "BIGINT", "device memory in use, bytes"),
        C(nf.MEM_TOTAL_BYTES, "BIGINT", "device memory, bytes"),
        C(nf.POWER_W, "DOUBLE", "board power draw, W"),
        C(nf.SM_CLOCK_MHZ, "DOUBLE", "SM clock, MHz"),
        C(nf.MEM_CLOCK_MHZ, "DOUBLE", "memory clock, MHz"),
        C(nf.TEMP_C, "DOUBLE", "GPU temperature, °C"),
        C(nf.PCIE_RX_BYTES_S, "DOUBLE", "PCIe receive throughput, bytes/s"),
        C(nf.PCIE_TX_BYTES_S, "DOUBLE", "PCIe transmit throughput, bytes/s"),
        C(nf.SM_ACTIVE_PCT, "DOUBLE", "GPM SM activity (Hopper+), %"),
        C(nf.TENSOR_ACTIVE_PCT, "DOUBLE", "GPM tensor-core activity (Hopper+), %"),
    ),
)

MEMORY_EVENTS = Table(
    "memory_events",
    "The caching allocator's `[memory]` instants (a trace recorded with `profile_memory=True`): one row "
    "per allocation or free, on any device (CPU ones too). Read from the events' `args`, which `events` "
    "does not keep (its `bytes` column is a copy's `args.bytes`; these carry `args.Bytes`). A run "
    "ingested before this table existed has no rows in it: ingest the trace again.",
    (
        C("run_id", "VARCHAR NOT NULL", "-> runs.run_id"),
        C("rank", "INTEGER NOT NULL", "-> ranks.rank"),
        C("tid", "BIGINT", "thread that allocated (to find the op that asked for the memory)"),
        C("ts_ns", "BIGINT NOT NULL", "when, trace time in ns (= trace µs × 1000, exact)"),
        C("device_type", "INTEGER", "`args.Device Type`: 0 CPU, 1 CUDA (c10::DeviceType)"),
        C("device", "INTEGER", "`args.Device Id` (-1 for the CPU)"),
        C("addr", "BIGINT", "`args.Addr`: the block's address"),
        C("bytes", "BIGINT", "`args.Bytes`: > 0 an allocation, < 0 a free, bytes"),
        C(
            "total_allocated",
            "BIGINT",
            "`args.Total Allocated`: bytes the allocator had handed out on the device after this event",
        ),
        C(
            "total_reserved",
            "BIGINT",
            "`args.Total Reserved`: bytes the allocator held from the driver (cudaMalloc'd) after it",
        ),
    ),
)


RANK_SUMMARIES = Table(
    "rank_summaries",
    "Each rank's analysis, computed while the rank is ingested (one row per rank and named part, "
    "e.g. `headline`, `rank_row`, `kernels`, `steps`), so a run's page and `analyze` read these "
    "rows instead of every rank's events. A row whose `version` is not the part's current one is "
    "recomputed from the events when next read. Added to schema 3 stores when they are opened "
    "(an additive table: older gpuscope ignores it).",
    (
        C("run_id", "VARCHAR NOT NULL", "-> runs.run_id"),
        C("rank", "INTEGER NOT NULL", "-> ranks.rank"),
        C("part", "VARCHAR NOT NULL", "the summary part's name (gpuscope.analysis.rank_summary)"),
        C("version", "INTEGER NOT NULL", "the part's analysis version when it was computed"),
        C("doc", "JSON NOT NULL", "the part, as JSON (units as in `analyze --json`)"),
        C("computed_at", "TIMESTAMP NOT NULL", "when it was computed, UTC"),
    ),
    ("run_id", "rank", "part"),
)

TABLES: tuple[Table, ...] = (
    RUNS,
    RANKS,
    NAMES,
    EVENTS,
    THREADS,
    NVML_SERIES,
    NVML_SAMPLES,
    MEMORY_EVENTS,
    RANK_SUMMARIES,
)

META_DDL = "CREATE TABLE IF NOT EXISTS gpuscope_meta (key VARCHAR PRIMARY KEY, value VARCHAR)"


def markdown() -> str:
    """docs/schema.md, generated from the definitions above."""
    out = [
        "# Database schema",
        "",
        "<!-- generated by `python -m gpuscope.store.schema`; do not edit by hand -->",
        "",
        f"Schema version {SCHEMA_VERSION}. The store is a DuckLake: these tables' rows live in Parquet "
        "files, listed in a catalog database (SQLite for a local store, PostgreSQL for a team store); "
        "a legacy store is one DuckDB file with the same tables. "
        + (__doc__ or "").split("\n\n", 1)[1].strip(),
        "",
        "A run is published atomically: every row of it is written in one transaction (one DuckLake "
        "snapshot), so a reader in any process sees the run whole or not at all. Events are buffered "
        "and written in chunks of 32,768 rows (`$GPUSCOPE_FLUSH_ROWS`), sorted by (rank, cat, ts_ns), so memory stays "
        "flat whatever the trace size. A failed ingest rolls back; the Parquet files of one that was "
        "killed are deleted by the next writer. An analysis (`analyze_run`) reads a lake in one "
        "read transaction, so it sees one snapshot and the catalog is asked for it once rather than "
        "per statement; it reads the run's `names` rows once (a temp table for the call). "
        "On a lake connection a name is looked up among the temporary tables, then DuckDB's own "
        "functions, then the lake, so a statement over an analysis's temporary tables reads "
        "nothing of the catalog (the lake's tables are created as `lake.<table>`). Every table "
        "has a statistics row from its creation (a placeholder row inserted and deleted in the "
        "transaction that creates it; a store made before, on its next open): DuckLake re-reads "
        "the catalog's statistics for each column of a table that never held a row, on every "
        "statement. "
        "DuckLake has no primary keys: the keys below are "
        "kept by gpuscope (run ids are content hashes; the same files are stored once).",
        "",
    ]
    for t in TABLES:
        out += [f"## `{t.name}`", "", t.doc, ""]
        if t.primary_key:
            out += [f"Key: `({', '.join(t.primary_key)})`", ""]
        out += ["| column | type | meaning |", "| --- | --- | --- |"]
        out += [f"| `{c.name}` | {c.type} | {c.doc} |" for c in t.columns]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(), end="")
