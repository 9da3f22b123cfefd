"""Odd argument types never refuse a trace (issue 8): typed where they can be, JSON text otherwise.

The variants are those Kineto and PyTorch wrote between torch 1.13 and 2.11, plus the ones other
exporters write: Inductor launch ops of older PyTorch carry ``"grid": "grid(100,)"`` (a string),
Inductor's ``stream`` is a raw stream handle, ids come as strings or integral floats, ``args`` can be
null or an array, and metadata-looking keys (``name``) appear on ordinary events.
"""

from __future__ import annotations

import json

import pytest
from gpuscope.analysis.report import analyze_run
from gpuscope.cli.main import main
from gpuscope.ingest import batch_insert
from gpuscope.ingest.loader import ingest_paths
from tracegen import PID, TID, TraceBuilder

INDUCTOR_ARGS = {
    "kernel_file": "/tmp/torchinductor_root/ab/cabcdef.py",
    "kernel_hash": "abcdef",
    "kernel_backend": "triton",
    "stream": 0,
    "num_warps": 4,
    "num_stages": 1,
}


def compiled_trace(grid) -> TraceBuilder:
    """A torch.compile step: the Inductor launch op (a cpu_op named after the Triton kernel) holds
    the runtime launch of that kernel."""
    b = TraceBuilder()
    b.step(1, 0, 400)
    for i in range(3):
        t0 = 10 + 100 * i
        b.cpu_op("triton_poi_fused_add_relu_0", t0, 20, grid=grid, **INDUCTOR_ARGS)
        b.launch("triton_poi_fused_add_relu_0", t0 + 5, t0 + 30, 40)
    return b


def odd_rows(con, run_id):
    return con.execute(
        "SELECT n.name, e.grid, e.odd_args FROM events e JOIN names n USING (run_id, name_id) "
        "WHERE run_id = ? AND e.odd_args IS NOT NULL ORDER BY e.ts_ns",
        [run_id],
    ).fetchall()


@pytest.mark.slow
def test_inductor_string_grid_is_kept_as_text_and_the_trace_analysed(con, tmp_path):
    path = compiled_trace("grid(100,)").write(tmp_path / "compiled.json")
    res = ingest_paths(con, [path])[0]
    rows = odd_rows(con, res.run_id)
    assert rows == [("triton_poi_fused_add_relu_0", None, '{"grid":"grid(100,)"}')] * 3
    assert len(res.warnings) == 1
    assert res.warnings[0].startswith("3 events had values of unexpected types")
    assert 'args.grid = "grid(100,)"' in res.warnings[0]
    doc = analyze_run(con, res.run_id).to_json()
    k = doc["kernels"]
    assert k["n_kernels"] == 3 and k["by_category"]["elementwise"] == pytest.approx(120)
    assert [o["op"] for o in k["by_op"]] == ["triton_poi_fused_add_relu_0"]


def test_cli_ingest_prints_the_note_and_exits_0(capsys, tmp_path):
    path = compiled_trace("grid(100,)").write(tmp_path / "compiled.json")
    code = main(["ingest", str(path), "--db", str(tmp_path / "s.duckdb")])
    err = capsys.readouterr().err
    assert code == 0
    assert f"gpuscope: note: {path}: 3 events had values of unexpected types" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("grid", "typed", "odd"),
    [
        ([100, 1, 1], [100, 1, 1], None),  # torch >= 2.1 with a list grid
        ([100, 2], [100, 2], None),
        ((100,), [100], None),
        ("grid(100,)", None, '{"grid":"grid(100,)"}'),
        ([[100, 1, 1]], None, '{"grid":[[100,1,1]]}'),
        ({"x": 1}, None, '{"grid":{"x":1}}'),
    ],
)
def test_grid_variants(con, tmp_path, grid, typed, odd):
    b = TraceBuilder()
    b.cpu_op("triton_poi_fused_0", 10, 20, grid=grid)
    b.launch("triton_poi_fused_0", 12, 40, 5)
    res = ingest_paths(con, [b.write(tmp_path / "g.json")])[0]
    row = con.execute(
        "SELECT e.grid, e.odd_args FROM events e JOIN names n USING (run_id, name_id) "
        "WHERE run_id = ? AND e.cat = 'cpu_op'",
        [res.run_id],
    ).fetchone()
    assert row == (typed, odd)


# (key, value in the trace, column, typed value, odd JSON text)
ARG_VARIANTS = [
    ("correlation", "57", "correlation", 57, None),  # ids written as strings
    ("External id", 12.0, "external_id", 12, None),  # integral floats
    ("External id", 12.5, "external_id", None, '{"External id":12.5}'),
    ("device", "cuda:0", "device", None, '{"device":"cuda:0"}'),
    ("device", True, "device", None, '{"device":true}'),
    ("stream", 140234567890123, "stream", 140234567890123, None),  # a raw stream handle
    ("stream", 2**64 - 1, "stream", None, '{"stream":18446744073709551615}'),  # beyond BIGINT
    ("stream", "<torch.cuda.Stream device=cuda:0 cuda_stream=0x0>", "stream", None, None),
    ("registers per thread", 32.5, "registers", None, '{"registers per thread":32.5}'),
    ("bytes", 1024.0, "bytes", 1024, None),
    ("flops", "1e9", "flops", 1e9, None),
    ("flops", [1, 2], "flops", None, '{"flops":[1,2]}'),
    ("Sequence number", None, "seq_num", None, None),
    ("name", 7, "input_types", None, '{"name":7}'),
    ("Input Dims", "[[1, 2]]", "input_dims", '"[[1, 2]]"', None),  # a string where a list was due
]


@pytest.mark.slow
@pytest.mark.parametrize(("key", "value", "col", "typed", "odd"), ARG_VARIANTS)
def test_arg_variants(con, tmp_path, key, value, col, typed, odd):
    b = TraceBuilder()
    b.cpu_op("aten::add", 10, 20)
    b.events[-1]["args"][key] = value
    b.cpu_op("grid_mark", 40, 5, grid="grid(1,)")  # one odd value in the batch: the lenient path
    res = ingest_paths(con, [b.write(tmp_path / "a.json")])[0]
    got = con.execute(
        f"SELECT e.{col}, e.odd_args FROM events e JOIN names n USING (run_id, name_id) "
        "WHERE run_id = ? AND n.name = 'aten::add'",
        [res.run_id],
    ).fetchone()
    if key == "stream" and isinstance(value, str):
        odd = json.dumps({"stream": value}, separators=(",", ":"))
    assert got == (typed, odd)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "odd"), [(None, None), ([], '{"args":[]}'), ("x", '{"args":"x"}'), ({}, None)]
)
def test_args_not_an_object(con, tmp_path, args, odd):
    b = TraceBuilder()
    b.cpu_op("aten::add", 10, 20)
    b.events[-1]["args"] = args
    b.cpu_op("aten::mul", 40, 5, grid="grid(1,)")
    res = ingest_paths(con, [b.write(tmp_path / "a.json")])[0]
    got = con.execute(
        "SELECT e.odd_args, e.ts_ns, e.dur_ns FROM events e JOIN names n USING (run_id, name_id) "
        "WHERE run_id = ? AND n.name = 'aten::add'",
        [res.run_id],
    ).fetchone()
    assert got[0] == odd
    assert (
        got[1]
        - con.execute("SELECT min(ts_ns) FROM events WHERE run_id = ?", [res.run_id]).fetchone()[0]
        >= 0
        and got[2] == 20_000
    )


def test_numeric_string_times_and_float_ids(con, tmp_path):
    b = TraceBuilder()
    b.cpu_op("aten::add", 10, 20)
    ev = b.events[-1]
    ev["ts"], ev["dur"], ev["pid"], ev["tid"] = "10.5", "20", float(PID), float(TID)
    b.cpu_op("aten::mul", 40, 5, grid="grid(1,)")
    res = ingest_paths(con, [b.write(tmp_path / "a.json")])[0]
    row = con.execute(
        "SELECT e.dur_ns, e.pid, e.tid, e.odd_args FROM events e JOIN names n USING (run_id, name_id) "
        "WHERE run_id = ? AND n.name = 'aten::add'",
        [res.run_id],
    ).fetchone()
    assert row == (20_000, PID, TID, None)


@pytest.mark.slow
@pytest.mark.parametrize("value", [1, "7", 2.0])
def test_fast_and_lenient_paths_write_the_same_rows(con, tmp_path, monkeypatch, value):
    """A batch DuckDB reads (fast path) and the same batch read by the lenient decoder agree."""

    def build() -> TraceBuilder:
        b = TraceBuilder()
        b.step(1, 0, 100)
        b.cpu_op(
            "aten::mm", 5, 50, **{"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}
        )
        corr = b.launch("k0", 10, 20, 5)
        b.events[-3]["args"]["correlation"] = value if value != 1 else corr
        return b

    cols = "ph, cat, pid, tid, ts_ns, dur_ns, correlation, external_id, device, stream, grid, block, input_dims, input_types, odd_args"
    fast = ingest_paths(con, [build().write(tmp_path / "fast.json")], name="fast")[0].run_id
    monkeypatch.setattr(batch_insert, "strict_json", lambda b: False)
    b2 = build()
    b2.extra_meta = {"variant": "lenient"}  # other bytes: another run id
    slow = ingest_paths(con, [b2.write(tmp_path / "slow.json")], name="slow")[0].run_id
    q = f"SELECT {cols} FROM events WHERE run_id = ? ORDER BY ts_ns, ph, cat"
    assert con.execute(q, [fast]).fetchall() == con.execute(q, [slow]).fetchall()
