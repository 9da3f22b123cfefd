"""Micro-experiments behind the ingest performance suggestions (nothing in ingest/ is changed).

    .venv/bin/python benchmarks/experiments_ingest.py TRACE [--which scan,decode,arrow,...]

TRACE should be small (~64 MB: ``make_big_trace.py SRC OUT --target-gb 0.064``): it is held in
memory and cut into batches by gpuscope's own splitter. Every step is timed per GB of JSON, as
wall seconds and as CPU seconds of the process (all threads; steadier on a busy machine):

* scan:    gpuscope's splitter vs a prototype that cuts with ``bytes.rfind`` of Kineto's event
           separator (the decoder then proves the cut: an unbalanced prefix does not decode);
* decode:  msgspec typed decode (gpuscope's Event) vs ``list[Raw]`` (tokenising only) vs a struct
           without ``args`` vs generic dicts;
* arrow:   ``kineto.to_arrow`` (Python lists per column -> Arrow; ingest before its DuckDB-reader path);
* pyarrow_json: the batch turned into NDJSON (3 ``bytes.replace``) and parsed by ``pyarrow.json``
           with an explicit schema straight into Arrow columns: a candidate for decode + to_arrow;
* insert:  ``INSERT INTO events SELECT * FROM arrow`` with DuckDB ``threads`` = 2 (default here)
           and 1, and the COMMIT (checkpoint) after it;
* duckdb_json: DuckDB's own ``read_json(format='array', columns=...)`` per batch (a negative result);
* overlap: decode + to_arrow + insert, serial vs the INSERT in a second thread;
* production: the ingest's own parsers, a batch to its Arrow rows: ``BatchParser.parse`` with the
           compiled parser (the fastest path), with DuckDB's reader (``$GPUSCOPE_COMPILED_PARSER=0``)
           and the msgspec fallback (``kineto.decode_batch`` + ``to_raw``);
* polars_ndjson: the NDJSON form parsed by polars' ``read_ndjson`` with the kept keys as its schema
           (``Input Dims``/``Input type``/``Concrete Inputs`` left out: polars cannot keep them as
           JSON text); skipped when polars is not installed (it is not a gpuscope dependency).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.json as pj
from gpuscope import store
from gpuscope.ingest import json_stream, kineto, source

SEP = b"\n  },\n  {"  # between two events, as Kineto writes them


def load_chunks(path: Path) -> list[bytes]:
    """The whole (small) trace's JSON text in chunks, in memory: the scan is timed without I/O."""
    return list(source.iter_json_bytes(path))


def batches(path: Path, chunks: list[bytes]) -> list[json_stream.Batch]:
    return list(json_stream.TraceSplitter(path, iter(chunks)).batches())


def rfind_split(text: bytes, batch_bytes: int) -> list[bytes]:
    """Prototype splitter: cut the events array at the last Kineto separator before ``batch_bytes``.

    Correctness comes from the decoder: a cut that is not between two top-level events leaves an
    unbalanced prefix, which msgspec rejects (a real splitter then falls back to the full scan).
    """
    start = text.index(b"{", text.index(b'"traceEvents"'))
    tail = text.rfind(b'"traceName"')
    end = text.rindex(b"]", 0, tail if tail > 0 else len(text))
    out = []
    a = start
    while a < end:
        z = text.rfind(SEP, a, a + batch_bytes)
        if z < 0 or a + batch_bytes >= end:
            z = text.rindex(b"}", a, end) + 1
        else:
            z += 4  # keep the closing "\n  }"
        out.append(b"[" + text[a:z] + b"]")
        nxt = text.find(b"{", z, z + 16)
        a = nxt if nxt >= 0 else end
    return out


def timed(fn: Callable[[], object], reps: int = 3) -> tuple[float, float]:
    """Best of ``reps``: (wall seconds, process CPU seconds)."""
    runs = []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        runs.append((time.perf_counter() - t, time.process_time() - c))
    return min(runs)


def put(res: dict[str, float], key: str, wc: tuple[float, float], nbytes: int) -> None:
    res[f"{key}.wall_s_per_gb"] = wc[0] / nbytes * 1e9
    res[f"{key}.cpu_s_per_gb"] = wc[1] / nbytes * 1e9


def exp_scan(path: Path, chunks: list[bytes], nbytes: int, res: dict[str, float]) -> None:
    text = b"".join(chunks)
    bb = json_stream.BATCH_BYTES
    put(res, "scan.splitter", timed(lambda: batches(path, chunks)), nbytes)
    put(res, "scan.rfind_cut", timed(lambda: rfind_split(text, bb)), nbytes)
    dec = msgspec.json.Decoder(list[msgspec.Raw])
    n_proto = sum(len(dec.decode(b)) for b in rfind_split(text, bb))
    n_real = sum(len(dec.decode(b.data)) for b in batches(path, chunks))
    res["scan.rfind_cut_same_events"] = float(n_proto == n_real)


class Slim(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None


def exp_decode(bs: list[json_stream.Batch], nbytes: int, res: dict[str, float]) -> None:
    raw = msgspec.json.Decoder(list[msgspec.Raw])
    slim = msgspec.json.Decoder(list[Slim])
    put(res, "decode.typed_event", timed(lambda: [kineto.decode_batch("x", b) for b in bs]), nbytes)
    put(res, "decode.list_raw", timed(lambda: [raw.decode(b.data) for b in bs]), nbytes)
    put(res, "decode.no_args_struct", timed(lambda: [slim.decode(b.data) for b in bs]), nbytes)
    put(
        res,
        "decode.generic_dicts",
        timed(lambda: [msgspec.json.decode(b.data) for b in bs], 1),
        nbytes,
    )


def exp_arrow(evs: list[list[kineto.Event]], nbytes: int, res: dict[str, float]) -> None:
    def current() -> None:
        names, labels = kineto.IdMap(), kineto.IdMap(-1, -1)
        for e in evs:
            kineto.to_arrow(e, "r", 0, names, labels, {})

    put(res, "arrow.to_arrow", timed(current), nbytes)


_ARGS = pa.struct([
    ("correlation", pa.int64()), ("External id", pa.int64()), ("device", pa.int32()),
    ("stream", pa.int64()), ("grid", pa.list_(pa.int32())), ("block", pa.list_(pa.int32())),
    ("registers per thread", pa.int32()), ("shared memory", pa.int64()), ("bytes", pa.int64()),
    ("flops", pa.float64()), ("Sequence number", pa.int64()), ("Fwd thread id", pa.int64()),
    ("Python id", pa.int64()), ("Python parent id", pa.int64()), ("name", pa.string()),
    ("Input Dims", pa.list_(pa.list_(pa.int64()))), ("Input type", pa.list_(pa.string())),
    ("Concrete Inputs", pa.list_(pa.string())),
])  # fmt: skip
PJ_SCHEMA = pa.schema([
    ("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()), ("pid", pa.int64()),
    ("tid", pa.int64()), ("ts", pa.float64()), ("dur", pa.float64()), ("id", pa.int64()), ("args", _ARGS),
])  # fmt: skip


def to_ndjson(batch: bytes) -> bytes:
    """A JSON array of Kineto-formatted events -> one event per line (valid JSON has no raw newline
    inside strings, so every newline left is layout)."""
    return batch[1:-1].replace(SEP, b"}\x1e{").replace(b"\n", b" ").replace(b"\x1e", b"\n")


def exp_pyarrow_json(bs: list[json_stream.Batch], nbytes: int, res: dict[str, float]) -> None:
    opts = pj.ParseOptions(explicit_schema=PJ_SCHEMA, unexpected_field_behavior="ignore")
    put(res, "pyarrow_json.to_ndjson", timed(lambda: [to_ndjson(b.data) for b in bs]), nbytes)
    nds = [to_ndjson(b.data) for b in bs]
    for threads in (False, True):
        stats = {"rows": 0, "fallbacks": 0}

        def parse(threads: bool = threads, stats: dict[str, int] = stats) -> None:
            stats["rows"] = stats["fallbacks"] = 0
            ro = pj.ReadOptions(use_threads=threads, block_size=8 << 20)
            for x in nds:
                try:
                    stats["rows"] += pj.read_json(
                        io.BytesIO(x), read_options=ro, parse_options=opts
                    ).num_rows
                except pa.ArrowInvalid:  # e.g. a string pid: that batch goes the msgspec way
                    stats["fallbacks"] += 1

        put(res, f"pyarrow_json.parse_threads_{int(threads)}", timed(parse), nbytes)
        res[f"pyarrow_json.parse_threads_{int(threads)}.batches_falling_back"] = stats["fallbacks"]


def _insert_all(con: duckdb.DuckDBPyConnection, tables: list[pa.Table]) -> None:
    for tb in tables:
        con.register("_b", tb)
        con.execute("INSERT INTO events SELECT * FROM _b")
        con.unregister("_b")


def exp_insert(tables: list[pa.Table], nbytes: int, tmp: Path, res: dict[str, float]) -> None:
    for threads in (2, 1):
        db = tmp / "ins.duckdb"
        db.unlink(missing_ok=True)
        con = store.connect(db)
        con.execute(f"SET threads = {threads}")
        con.execute("BEGIN")
        put(
            res,
            f"insert.threads_{threads}",
            timed(lambda con=con: _insert_all(con, tables), 1),
            nbytes,
        )
        put(
            res,
            f"commit.threads_{threads}",
            timed(lambda con=con: con.execute("COMMIT"), 1),
            nbytes,
        )
        con.close()
        db.unlink(missing_ok=True)


DUCK_COLS = {
    "ph": "VARCHAR", "cat": "VARCHAR", "name": "VARCHAR", "pid": "JSON", "tid": "JSON", "ts": "DOUBLE",
    "dur": "DOUBLE", "id": "JSON",
    "args": "STRUCT(correlation BIGINT, \"External id\" BIGINT, device INTEGER, stream BIGINT, "
            "grid INTEGER[], block INTEGER[], \"registers per thread\" INTEGER, \"shared memory\" BIGINT, "
            "bytes BIGINT, \"Input Dims\" JSON, \"Input type\" JSON, \"Concrete Inputs\" JSON, flops DOUBLE, "
            "\"Sequence number\" BIGINT, \"Fwd thread id\" BIGINT, \"Python id\" BIGINT, "
            "\"Python parent id\" BIGINT, name VARCHAR)",
}  # fmt: skip


def exp_duckdb_json(
    bs: list[json_stream.Batch], nbytes: int, tmp: Path, res: dict[str, float]
) -> None:
    f = tmp / "batch.json"
    con = duckdb.connect()
    cols = "{" + ", ".join(f"'{k}': '{v}'" for k, v in DUCK_COLS.items()) + "}"
    wall = cpu = 0.0
    for b in bs:
        f.write_bytes(b.data)
        w, c = timed(lambda: con.execute(
            f"CREATE OR REPLACE TABLE t AS SELECT * FROM read_json('{f}', format='array', "
            f"columns={cols}, maximum_object_size=1000000000)"), 1)  # fmt: skip
        wall, cpu = wall + w, cpu + c
    f.unlink()
    put(res, "duckdb_read_json", (wall, cpu), nbytes)


def exp_overlap(bs: list[json_stream.Batch], nbytes: int, tmp: Path, res: dict[str, float]) -> None:
    for threaded in (False, True):
        db = tmp / "ovl.duckdb"
        db.unlink(missing_ok=True)
        con = store.connect(db)
        con.execute("SET threads = 1")
        con.execute("BEGIN")

        def run(con: duckdb.DuckDBPyConnection = con, threaded: bool = threaded) -> None:
            names, labels = kineto.IdMap(), kineto.IdMap(-1, -1)
            q: queue.Queue[pa.Table | None] = queue.Queue(maxsize=2)

            def consumer() -> None:
                while (tb := q.get()) is not None:
                    _insert_all(con, [tb])

            th = threading.Thread(target=consumer) if threaded else None
            if th:
                th.start()
            for b in bs:
                tb = kineto.to_arrow(kineto.decode_batch("x", b), "r", 0, names, labels, {})
                if th:
                    q.put(tb)
                else:
                    _insert_all(con, [tb])
            if th:
                q.put(None)
                th.join()

        put(
            res,
            f"overlap.decode_arrow_insert_{'threaded' if threaded else 'serial'}",
            timed(run, 1),
            nbytes,
        )
        con.execute("ROLLBACK")
        con.close()
        db.unlink(missing_ok=True)


def exp_production(bs: list[json_stream.Batch], nbytes: int, res: dict[str, float]) -> None:
    from gpuscope.ingest import compiled_parser
    from gpuscope.ingest.batch_insert import BatchParser

    parser = BatchParser()
    old = os.environ.get(compiled_parser.ENV_SWITCH)
    try:
        if compiled_parser.enabled():
            put(
                res,
                "production.compiled_parser",
                timed(lambda: [parser.parse(Path("x"), b) for b in bs]),
                nbytes,
            )
        os.environ[compiled_parser.ENV_SWITCH] = "0"
        put(
            res,
            "production.duckdb_reader",
            timed(lambda: [parser.parse(Path("x"), b) for b in bs]),
            nbytes,
        )
    finally:
        if old is None:
            os.environ.pop(compiled_parser.ENV_SWITCH, None)
        else:
            os.environ[compiled_parser.ENV_SWITCH] = old
        parser.close()
    put(
        res,
        "production.msgspec_fallback",
        timed(lambda: [kineto.to_raw(kineto.decode_batch("x", b)) for b in bs]),
        nbytes,
    )


def exp_polars(bs: list[json_stream.Batch], nbytes: int, res: dict[str, float]) -> None:
    try:
        import polars as pl
    except ImportError:
        print("skipped ['polars_ndjson']: polars is not installed")
        return
    args = pl.Struct(
        {
            "correlation": pl.Int64, "External id": pl.Int64, "device": pl.Int32,
            "stream": pl.Int64, "grid": pl.List(pl.Int32), "block": pl.List(pl.Int32),
            "registers per thread": pl.Int32, "shared memory": pl.Int64, "bytes": pl.Int64,
            "flops": pl.Float64, "Sequence number": pl.Int64, "Fwd thread id": pl.Int64,
            "Python id": pl.Int64, "Python parent id": pl.Int64, "name": pl.String,
        }
    )  # fmt: skip
    schema = {
        "ph": pl.String, "cat": pl.String, "name": pl.String, "pid": pl.Int64, "tid": pl.Int64,
        "ts": pl.Float64, "dur": pl.Float64, "id": pl.Int64, "args": args,
    }  # fmt: skip
    nds = [to_ndjson(b.data) for b in bs]
    put(
        res,
        "polars_ndjson.parse",
        timed(lambda: [pl.read_ndjson(io.BytesIO(x), schema=schema).to_arrow() for x in nds]),
        nbytes,
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument(
        "--which",
        default="scan,decode,arrow,pyarrow_json,insert,duckdb_json,overlap,production,polars_ndjson",
    )
    a = ap.parse_args()
    which = set(a.which.split(","))
    chunks = load_chunks(a.trace)
    bs = batches(a.trace, chunks)
    nbytes = sum(len(b.data) for b in bs)
    res: dict[str, float] = {"bytes": nbytes, "batches": len(bs), "load_1m": os.getloadavg()[0]}
    tmp = Path(tempfile.mkdtemp(dir=os.environ.get("TMPDIR", "/tmp")))
    if "scan" in which:
        exp_scan(a.trace, chunks, nbytes, res)
    if "decode" in which:
        exp_decode(bs, nbytes, res)
    evs = [kineto.decode_batch("x", b) for b in bs]
    res["events"] = sum(map(len, evs))
    if "pyarrow_json" in which:
        exp_pyarrow_json(bs, nbytes, res)
    if "duckdb_json" in which:
        exp_duckdb_json(bs, nbytes, tmp, res)
    if "production" in which:
        exp_production(bs, nbytes, res)
    if "polars_ndjson" in which:
        exp_polars(bs, nbytes, res)
    old = {"arrow", "insert", "overlap"} & which
    if old and not hasattr(kineto, "to_arrow"):  # ingest moved to DuckDB's reader (batch_insert.py)
        print(
            f"skipped {sorted(old)}: this ingest has no kineto.to_arrow; see profile_ingest.py "
            "--duckdb-threads / --batch-mb for the DuckDB path"
        )
        old = set()
    if "arrow" in old:
        exp_arrow(evs, nbytes, res)
    if old & {"insert", "overlap"}:
        names, labels = kineto.IdMap(), kineto.IdMap(-1, -1)
        if "insert" in old:
            exp_insert(
                [kineto.to_arrow(e, "r", 0, names, labels, {}) for e in evs], nbytes, tmp, res
            )
        if "overlap" in old:
            exp_overlap(bs, nbytes, tmp, res)
    tmp.rmdir()
    res["load_1m_end"] = os.getloadavg()[0]
    for k, v in res.items():
        print(f"{k:<52} {v:10.2f}")
    print(json.dumps({k: round(v, 3) for k, v in res.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
