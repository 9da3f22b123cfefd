"""Memory from the allocator's events: a hand-made trace whose answers are worked out below, the
real H100 sample against torch.cuda.max_memory_allocated(), and the restricted snapshot reader."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
from gpuscope.analysis import fixes as R
from gpuscope.analysis.memory import SnapshotSummary, memory_analysis
from gpuscope.analysis.report import analyze_run
from gpuscope.analysis.steps import find_window
from gpuscope.analysis.store_access import device_props, rank_meta
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.memory_snapshot import load_plain, read_snapshot
from tracegen import H100, TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "memory"
BWD_TID = 2002
MM, ADDMM, ADD = "aten::mm", "aten::addmm", "aten::add"


def hand_trace(total_mem: int | None = None) -> TraceBuilder:
    """Two steps, [100, 1100) and [1100, 2100) µs. Allocations (bytes, total allocated after,
    reserved after), each inside the op named:

    - t=50 (before the window): +4000 -> 4000 / 8000 (the weights)
    - step 1, forward [100, 500): aten::mm +1000 @210 -> 5000; aten::addmm +2000 @310 -> 7000,
      reserved 12000 (a cudaMalloc of 50 µs at 305): reserved peaks here, before allocated does
    - step 1, backward [500, 700) (autograd thread): aten::mm +3000 @520 -> 10000 / 12000 = THE PEAK;
      frees -1000 @650 -> 9000, -2000 @690 -> 7000
    - step 1, optimizer [800, 900): aten::add +500 @820 -> 7500; frees -500 @850, -3000 @860 -> 4000
    - step 2 (no backward: all forward): aten::mm +1000 @1210 -> 5000; free @1250 -> 4000;
      a cudaFree of 20 µs at 1300
    """
    dev = dict(H100)
    if total_mem is not None:
        dev["totalGlobalMem"] = total_mem
    t = TraceBuilder(devices=[dev])
    t.memory(50, 4000, 4000, 8000, addr=1)
    for n, start in ((1, 100.0), (2, 1100.0)):
        t.step(n, start, 1000)
        t.launch("k_fwd", start + 20, start + 30, 10)
    t.cpu_op(MM, 200, 60)
    t.memory(210, 1000, 5000, 8000, addr=2)
    t.cpu_op(ADDMM, 300, 50)
    t.runtime("cudaMalloc", 305, 50)
    t.memory(310, 2000, 7000, 12000, addr=3)
    t.cpu_op("autograd::engine::evaluate_function: MmBackward0", 500, 200, tid=BWD_TID)
    t.cpu_op(MM, 510, 90, tid=BWD_TID)
    t.memory(520, 3000, 10000, 12000, addr=4, tid=BWD_TID)
    t.memory(650, -1000, 9000, 12000, addr=2, tid=BWD_TID)
    t.memory(690, -2000, 7000, 12000, addr=3, tid=BWD_TID)
    t.annotation("Optimizer.step#SGD.step", 800, 100)
    t.cpu_op(ADD, 810, 20)
    t.memory(820, 500, 7500, 12000, addr=5)
    t.memory(850, -500, 7000, 12000, addr=5)
    t.memory(860, -3000, 4000, 12000, addr=4)
    t.cpu_op(MM, 1200, 60)
    t.memory(1210, 1000, 5000, 12000, addr=2)
    t.memory(1250, -1000, 4000, 12000, addr=2)
    t.runtime("cudaFree", 1300, 20)
    # a CPU allocation: not the GPU's memory
    t.memory(215, 64, 64, 0, device=-1, device_type=0, addr=9)
    return t


def _memory(con, tmp_path: Path, t: TraceBuilder):
    rid = ingest_paths(con, [t.write(tmp_path / "mem.json")])[0].run_id
    w = find_window(con, rid, 0, None)
    meta = rank_meta(con, rid, 0)
    return rid, memory_analysis(con, rid, 0, w, 0, device_props(meta, 0), meta.get("metadata"))


@pytest.mark.slow
def test_ingest_keeps_allocator_events(con, tmp_path: Path) -> None:
    rid = ingest_paths(con, [hand_trace().write(tmp_path / "mem.json")])[0].run_id
    rows = con.execute(
        "SELECT ts_ns, device_type, device, addr, bytes, total_allocated, total_reserved, tid "
        "FROM memory_events WHERE run_id = ? ORDER BY ts_ns",
        [rid],
    ).fetchall()
    assert len(rows) == 12  # 11 on the GPU, 1 on the CPU
    assert rows[0] == (50_000, 1, 0, 1, 4000, 4000, 8000, 1001)
    assert rows[2][:7] == (215_000, 0, -1, 9, 64, 64, 0)  # the CPU one, kept as such
    assert rows[4][3:8] == (4, 3000, 10000, 12000, BWD_TID)


@pytest.mark.slow
def test_hand_trace_memory(con, tmp_path: Path) -> None:
    _, m = _memory(con, tmp_path, hand_trace())
    j = m.to_json()
    assert m.recorded and m.device == 0
    assert j["peak_allocated_bytes"] == 10000
    assert j["peak_reserved_bytes"] == 12000
    assert j["peak_at_us"] == pytest.approx(520.0)  # trace µs
    assert j["reserved_minus_allocated_at_peak_bytes"] == 2000
    assert j["start_allocated_bytes"] == 4000
    assert j["device_total_bytes"] == H100["totalGlobalMem"]
    assert j["headroom_bytes"] == H100["totalGlobalMem"] - 12000
    ph = j["by_phase"]
    assert ph["forward"] == {
        "peak_allocated_bytes": 7000,
        "allocated_bytes_per_step": 2000.0,  # (1000 + 2000 + 1000) / 2 steps
        "freed_bytes_per_step": 500.0,  # the step-2 free of 1000
        "allocations_per_step": 1.5,
    }
    assert ph["backward"]["peak_allocated_bytes"] == 10000
    assert ph["backward"]["allocated_bytes_per_step"] == 1500.0
    assert ph["optimizer"]["peak_allocated_bytes"] == 7500
    assert ph["optimizer"]["freed_bytes_per_step"] == 1750.0  # (500 + 3000) / 2
    assert [(o["op"], o["allocated_bytes_per_step"]) for o in j["top_ops"]] == [
        (MM, 2500.0),
        (ADDMM, 1000.0),
        (ADD, 250.0),
    ]
    held = {h["op"]: h["bytes"] for h in j["held_at_peak"]}
    assert held == {MM: 4000, "(allocated before the window)": 4000, ADDMM: 2000}
    assert j["malloc"]["calls"] == 2
    assert j["malloc"]["us"] == pytest.approx(70.0)
    assert j["malloc"]["steps_with_calls"] == 2
    # the memory line: the level at the window's start, then every event in it
    assert list(m.series["allocated"])[:3] == [4000, 5000, 7000]
    assert int(m.series["allocated"].max()) == 10000


@pytest.mark.slow
def test_no_allocator_events_says_so(con, tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("k", 10, 20, 30)
    _, m = _memory(con, tmp_path, t)
    assert not m.recorded and m.peak_allocated_bytes is None
    assert "profile_memory=True" in m.notes[0]


@pytest.mark.slow
def test_near_full_finding_and_batch_headroom(con, tmp_path: Path) -> None:
    # 12000 of 13000 bytes reserved: 92 % >= 90 %
    rid = ingest_paths(con, [hand_trace(total_mem=13000).write(tmp_path / "full.json")])[0].run_id
    rep = analyze_run(con, rid)
    recs = {r.id: r for r in rep.recommendations}
    assert "memory_near_full" in recs
    ev = recs["memory_near_full"].evidence
    assert ev["peak_reserved_bytes"] == 12000 and ev["device_total_bytes"] == 13000
    assert ev["malloc_calls"] == 2
    assert recs["memory_near_full"].gain_phrase.startswith("frees GPU memory")
    assert rep.to_json()["memory"]["near_full"] is True
    # far from full: no finding
    rid2 = ingest_paths(con, [hand_trace().write(tmp_path / "roomy.json")])[0].run_id
    assert "memory_near_full" not in {r.id for r in analyze_run(con, rid2).recommendations}


def test_batch_size_summary_gives_the_headroom() -> None:
    from gpuscope.analysis.idle import CAUSES, IdleResult

    idle = IdleResult(10_000_000, 10, 0, 0, 0, dict.fromkeys(CAUSES, 0))
    k = R.KernelStats(n_kernels=100, kernel_us=1000.0, small_grid_us=800.0, small_grid_fill=0.25)
    mem = {"peak_reserved_bytes": 8 * 2**30, "device_total_bytes": 80 * 2**30,
           "peak_allocated_bytes": 6 * 2**30}  # fmt: skip
    inp = R.Inputs(window_ns=10_000_000, n_steps=10, busy_pct=50.0, idle=idle, kernels=k,
                   mem_used_frac=0.1, memory=mem)  # fmt: skip
    rec = R.BY_ID["batch_size"].find(inp)
    assert rec is not None
    assert "leaving 72 GiB of headroom" in rec.evidence["summary"]
    assert rec.evidence["headroom_bytes"] == 72 * 2**30


@pytest.mark.slow
def test_real_trace_peak_equals_torch_max_memory_allocated(con) -> None:
    facts = json.loads((SAMPLE / "facts.json").read_text())
    rid = ingest_paths(con, [SAMPLE / "gpt_mem.pt.trace.json.gz"])[0].run_id
    j = analyze_run(con, rid).to_json()["memory"]
    assert j["recorded"]
    assert j["peak_allocated_bytes"] == facts["max_memory_allocated"] == 484664320
    assert j["peak_reserved_bytes"] == facts["max_memory_reserved"]
    assert j["device_total_bytes"] == facts["total_memory"]
    assert set(j["by_phase"]) >= {"forward", "backward", "optimizer"}
    assert j["by_phase"]["backward"]["peak_allocated_bytes"] == j["peak_allocated_bytes"]


# -- the snapshot pickle ---------------------------------------------------------------------------


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # what a malicious "snapshot" carries: a call of os.system
        return (os.system, (f"touch {self.marker}",))


def evil_pickle(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "PWNED"
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "x": _Evil(marker)}))
    return p, marker


def test_real_snapshot_reads() -> None:
    facts = json.loads((SAMPLE / "facts.json").read_text())
    s = read_snapshot(SAMPLE / "gpt_mem.snapshot.pickle")
    d = s["devices"]["0"]
    assert d["reserved_bytes"] == facts["max_memory_reserved"]  # the cache kept its segments
    assert d["segments"] > 0 and d["allocated_bytes"] > 0
    assert s["actions"]["alloc"] > 0


def test_snapshot_summary_is_what_ingest_stored() -> None:
    """The page model of a stored snapshot: every figure of ingest's summary, as attributes, and
    its JSON the same document (key order too); a summary missing figures reads 0."""
    stored = read_snapshot(SAMPLE / "gpt_mem.snapshot.pickle")
    s = SnapshotSummary.from_stored(stored)
    assert s.file == "gpt_mem.snapshot.pickle"
    assert s.devices["0"].segments == stored["devices"]["0"]["segments"] > 0
    assert (
        s.devices["0"].largest_free_block_bytes
        == stored["devices"]["0"]["largest_free_block_bytes"]
    )
    assert s.actions == stored["actions"]
    assert json.dumps(s.to_json()) == json.dumps(stored)
    short = SnapshotSummary.from_stored({"file": "x.pickle", "devices": {"1": {"segments": 2}}})
    assert short.devices["1"].segments == 2 and short.devices["1"].reserved_bytes == 0
    assert short.actions == {}


def test_restricted_unpickler_refuses_callables(tmp_path: Path) -> None:
    p, marker = evil_pickle(tmp_path)
    with pytest.raises(IngestError) as e:
        read_snapshot(p)
    assert "refused" in str(e.value) and "system" in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists()
    assert load_plain(pickle.dumps({"a": [1, 2.5, "x", (None, True)]})) == {
        "a": [1, 2.5, "x", (None, True)]
    }
    with pytest.raises(pickle.UnpicklingError):
        load_plain(pickle.dumps(Path("x")))  # any class, not just functions


@pytest.mark.slow
def test_cli_refuses_a_callable_snapshot(tmp_path: Path) -> None:
    from clitools import cli_in_process

    p, marker = evil_pickle(tmp_path)
    trace = hand_trace().write(tmp_path / "t.json")
    db = tmp_path / "store"
    r = cli_in_process("ingest", str(trace), str(p), "--db", str(db))
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "snap.pickle" in lines[0] and "refused" in lines[0], r.stderr
    assert not marker.exists()
    runs = cli_in_process("runs", "--json", "--db", str(db))
    assert json.loads(runs.stdout or "[]") == []
    # the real one is kept with the run
    ok = cli_in_process(
        "ingest", str(trace), "--db", str(db),
        "--memory-snapshot", str(SAMPLE / "gpt_mem.snapshot.pickle"),
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    out = cli_in_process("analyze", ok.stdout.split()[0], "--json", "--db", str(db))
    snap = json.loads(out.stdout)["memory"]["snapshot"]
    assert snap["file"] == "gpt_mem.snapshot.pickle" and snap["devices"]["0"]["segments"] > 0
    # the typed SnapshotSummary writes back what ingest stored, key for key and in order
    stored = read_snapshot(SAMPLE / "gpt_mem.snapshot.pickle")
    assert json.dumps(snap) == json.dumps(stored)


@pytest.mark.slow
def test_a_store_from_before_memory_events_gains_the_table(db_path: Path, tmp_path: Path) -> None:
    """A store written before ``memory_events`` existed: opening it adds the (empty) table, its runs
    still analyse, and their memory says to ingest again."""
    from gpuscope.store import connect

    con = connect(db_path)
    rid = ingest_paths(con, [hand_trace().write(tmp_path / "old.json")])[0].run_id
    with con.writing():
        con.execute("DROP TABLE memory_events")
    con.close()
    con = connect(db_path)
    try:
        assert con.execute("SELECT count(*) FROM memory_events").fetchone() == (0,)
        m = analyze_run(con, rid).to_json()["memory"]
        assert m["recorded"] is False and "ingested before" in m["notes"][0]
    finally:
        con.close()


@pytest.mark.slow
def test_a_run_without_allocator_events_reads_no_memory_events(
    con, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a run has allocator events comes from its names (every ``memory_events`` row is an
    event named ``[memory]``): without one, neither the memory analysis nor the roofline's foreach
    sizes query ``memory_events`` (25-50 ms a query on a lake, even empty), and without NVML
    series nothing asks ``nvml_samples``; with them, they are read as before (the hand trace's
    figures above, tests/test_nvml_ingest.py)."""
    from gpuscope.analysis.memory import memory_devices, recorded_allocator

    # the real DDP rank 0: optimizer foreach ops (the roofline sizes their lists), no allocator events
    ddp = (
        Path(__file__).resolve().parent.parent
        / "sample_traces"
        / "ddp"
        / "ddp_rank0.pt.trace.json.gz"
    )
    plain = ingest_paths(con, [ddp])[0].run_id
    mem = ingest_paths(con, [hand_trace().write(tmp_path / "mem.json")])[0].run_id
    assert (recorded_allocator(con, plain), recorded_allocator(con, mem)) == (False, True)
    assert memory_devices(con, mem, 0) == [0]
    seen: list[str] = []
    execute = type(con).execute

    def spy(self, sql, params=None):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(self, sql, params)

    monkeypatch.setattr(type(con), "execute", spy)
    report = analyze_run(con, plain).to_json()
    assert report["memory"]["recorded"] is False
    foreach = [o["op"] for o in report["roofline"]["unmodelled_top"] if "_foreach" in o["op"]]
    assert foreach and "sizes unknown" in foreach[0]  # looked for, without memory_events
    assert seen and not [s for s in seen if "memory_events" in s]
    # nor, without NVML series, NVML's samples for the recommendations' memory figure
    assert not [s for s in seen if "nvml_samples" in s]
    seen.clear()
    assert memory_devices(con, mem, 0) == [0] and any("memory_events" in s for s in seen)
