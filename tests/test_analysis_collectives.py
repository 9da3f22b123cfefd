"""Collectives matched across ranks (gpuscope.analysis.collectives): hand-made frames and traces
with known arrivals give exact skew, wait, transfer and last arriver; planted delays give the
planted straggler; partial, p2p, several process groups; the Kineto args of torch 2.0-2.11."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from gpuscope.analysis.collectives import (
    FRAME_COLUMNS,
    _typed,
    bus_factor,
    coll_of,
    collective_from_args,
    dtype_of_kernel,
    match_collectives,
    message_bytes,
    rank_collectives,
    run_collectives,
    sizes_from_input_dims,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

US = 1000  # ns


def frame(rank: int, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A rank frame from short rows (coll, start, end in µs; pg defaults to "0")."""
    out = []
    for r in rows:
        d: dict[str, Any] = {
            "rank": rank,
            "device": rank,
            "stream": 17,
            "pg": "0",
            "pg_size": None,
            "seq": None,
            "coll": "allreduce",
            "peer": None,
            "dtype": "f32",
            "msg_bytes": None,
            "step": None,
            "phase": "backward",
            "launched": True,
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        }
        d.update(r)
        d["start_ns"] = int(r["start"] * US)
        d["end_ns"] = int(r["end"] * US)
        out.append({k: d[k] for k in FRAME_COLUMNS})
    return _typed(pd.DataFrame(out))


def by_rank(m, instance: int, col: str) -> dict[int, Any]:
    r = m.rows[m.rows["instance"] == instance]
    return dict(zip(r["rank"].astype(int), r[col], strict=True))


def test_three_ranks_exact_skew_wait_transfer_and_bandwidth():
    """Arrivals 1000, 1300, 1800 µs, all end at 2000 µs, 4 MB: skew 800 µs, rank 2 last, waits
    800/500/0 µs, transfer 200 µs each; algbw 4e6 B / 200 µs = 20 GB/s, busbw x 2(3-1)/3."""
    frames = [
        frame(r, [{"start": s, "end": 2000, "msg_bytes": 4_000_000, "step": 7}])
        for r, s in ((0, 1000), (1, 1300), (2, 1800))
    ]
    m = match_collectives(frames, link_gbs=100.0)
    [inst] = m.instances.itertuples()
    assert inst.skew_ns == 800 * US and inst.last_rank == 2 and inst.n_present == 3
    assert by_rank(m, inst.instance, "wait_ns") == {0: 800 * US, 1: 500 * US, 2: 0}
    assert by_rank(m, inst.instance, "transfer_ns") == {0: 200 * US, 1: 200 * US, 2: 200 * US}
    assert inst.algbw_gbs == pytest.approx(20.0)
    assert inst.busbw_gbs == pytest.approx(20.0 * 4 / 3)
    assert inst.link_pct == pytest.approx(100 * 20.0 * 4 / 3 / 100.0)
    assert inst.missing == []
    sg = m.straggler
    assert sg is not None and sg.rank == 2
    assert sg.caused_wait_ns == 1300 * US and sg.waiting_rank == 0 and sg.waiting_ns == 800 * US
    assert sg.by_step_ns == {7: 1300 * US} and sg.by_phase_ns == {"backward": 1300 * US}


def test_wait_is_clipped_to_the_kernel_and_transfer_never_negative():
    """A rank whose kernel ends before the last arrival (a collective it left early, e.g. a
    broadcast root): its wait is its whole kernel, its transfer 0."""
    frames = [
        frame(0, [{"start": 0, "end": 100, "coll": "broadcast"}]),
        frame(1, [{"start": 300, "end": 400, "coll": "broadcast"}]),
    ]
    m = match_collectives(frames)
    assert by_rank(m, 0, "wait_ns") == {0: 100 * US, 1: 0}
    assert by_rank(m, 0, "transfer_ns") == {0: 0, 1: 100 * US}


def test_order_within_a_step_survives_ranks_whose_traces_start_apart():
    """Without Seq, instances are numbered per (process group, step): rank 1's trace lacks step
    4, yet step 5's collectives still pair up; step 4's are said to miss rank 1."""
    f0 = frame(
        0,
        [
            {"start": 0, "end": 50, "step": 4},
            {"start": 100, "end": 150, "step": 5},
            {"start": 200, "end": 260, "step": 5},
        ],
    )
    f1 = frame(1, [{"start": 120, "end": 150, "step": 5}, {"start": 250, "end": 260, "step": 5}])
    m = match_collectives([f0, f1])
    inst = m.instances.set_index("step")
    assert inst.loc[4, "missing"] == [1]
    s5 = m.rows[m.rows["step"] == 5].sort_values(["start_ns", "rank"])
    assert list(s5["wait_ns"]) == [20 * US, 0, 50 * US, 0]
    [line] = m.missing_sentences()
    assert "rank 1 missing from allreduce" in line and "step 4" in line and "1 of 2 ranks" in line


def test_seq_matches_where_order_would_not():
    """With the group's sequence numbers (newer Kineto's Seq) a call missing on one rank does not
    shift the others: seq 2 pairs with seq 2."""
    f0 = frame(0, [{"start": 0, "end": 40, "seq": 1}, {"start": 100, "end": 140, "seq": 2}])
    f1 = frame(1, [{"start": 130, "end": 140, "seq": 2}])
    m = match_collectives([f0, f1])
    assert m.id_method == "seq"
    inst = m.instances.set_index("seq")
    assert inst.loc[1, "missing"] == [1] and inst.loc[2, "missing"] == []
    assert inst.loc[2, "skew_ns"] == 30 * US and inst.loc[2, "last_rank"] == 1


def test_p2p_matched_by_peer_and_direction():
    """Pipeline send/recv: 0 -> 1 and 2 -> 3 run at once on one stream number; each recv pairs
    with its own sender, and the receiver waits for a late sender."""
    frames = [
        frame(0, [{"coll": "send", "peer": 1, "start": 100, "end": 200}]),
        frame(1, [{"coll": "recv", "peer": 0, "start": 40, "end": 200}]),
        frame(2, [{"coll": "send", "peer": 3, "start": 10, "end": 90}]),
        frame(3, [{"coll": "recv", "peer": 2, "start": 10, "end": 90}]),
    ]
    m = match_collectives(frames)
    assert len(m.instances) == 2
    pairs = {tuple(sorted(g["rank"])) for _, g in m.rows.groupby("instance")}
    assert pairs == {(0, 1), (2, 3)}
    assert by_rank(m, int(m.rows.loc[m.rows["rank"] == 1, "instance"].iloc[0]), "wait_ns") == {
        0: 0,
        1: 60 * US,
    }
    assert m.instances["missing"].map(len).sum() == 0


def test_several_process_groups_tp_and_dp():
    """4 ranks, TP groups {0,1},{2,3} and DP groups {0,2},{1,3} (Megatron's layout, named as
    torch >= 2.3 writes them): every instance has exactly its group's two ranks."""
    rows = {
        0: [("tp0", 0), ("dp0", 500)],
        1: [("tp0", 10), ("dp1", 520)],
        2: [("tp1", 0), ("dp0", 600)],
        3: [("tp1", 30), ("dp1", 500)],
    }
    frames = [
        frame(r, [{"pg": pg, "start": s, "end": s + 100, "pg_size": 2} for pg, s in v])
        for r, v in rows.items()
    ]
    m = match_collectives(frames)
    groups = {
        g["pg"].iloc[0] + ":" + ",".join(map(str, sorted(g["rank"])))
        for _, g in m.rows.groupby("instance")
    }
    assert groups == {"tp0:0,1", "tp1:2,3", "dp0:0,2", "dp1:1,3"}
    inst = m.instances.set_index("pg")
    assert inst.loc["dp0", "last_rank"] == 2 and inst.loc["dp0", "skew_ns"] == 100 * US
    assert (m.instances["n_expected"] == 2).all()


def test_fsdp_allgather_and_reducescatter_bytes_and_bus_factor():
    """FSDP on 4 ranks: all-gather of a 1 M-element bf16 shard (output 4 M elements = 8 MB) and
    reduce-scatter of the 4 M gradient (8 MB in): S is the whole buffer, busbw x 3/4."""
    ag = message_bytes("allgather", 1_000_000, 4_000_000, 2, 4)
    rs = message_bytes("reducescatter", 4_000_000, 1_000_000, 2, 4)
    assert ag == rs == 8_000_000
    assert message_bytes("allgather", 1_000_000, None, 2, 4) == 8_000_000  # output from n
    frames = [
        frame(
            r,
            [
                {
                    "coll": "allgather",
                    "start": 0 + r,
                    "end": 104,
                    "msg_bytes": ag,
                    "phase": "forward",
                },
                {"coll": "reducescatter", "start": 200, "end": 300, "msg_bytes": rs},
            ],
        )
        for r in range(4)
    ]
    m = match_collectives(frames)
    inst = m.instances.set_index("coll")
    assert inst.loc["allgather", "transfer_ns"] == 101 * US
    assert inst.loc["allgather", "busbw_gbs"] == pytest.approx(8e6 / (101 * US) * 3 / 4)
    assert inst.loc["reducescatter", "busbw_gbs"] == pytest.approx(8e6 / (100 * US) * 3 / 4)
    assert bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor("broadcast", 8) == bus_factor("reduce", 8) == 1.0
    assert bus_factor("alltoall", 8) == pytest.approx(7 / 8)


def test_ddp_buckets_every_bucket_its_instance_and_the_straggler_by_phase():
    """DDP: three buckets per step in backward, an optimizer-phase all-reduce (e.g. a grad-norm);
    rank 1 is late in backward only: the straggler's caused wait is all in backward."""
    f = {0: [], 1: []}
    for step in (1, 2):
        base = step * 10_000
        for b, (s0, s1) in enumerate(((0, 900), (1000, 1800), (2000, 2700))):
            for r, s in ((0, s0), (1, s1)):
                f[r].append({"start": base + s, "end": base + 3000 + b * 10, "step": step})
        for r in (0, 1):
            f[r].append(
                {
                    "start": base + 5000 + (20 if r == 0 else 0),
                    "end": base + 5100,
                    "step": step,
                    "phase": "optimizer",
                }
            )
    m = match_collectives([frame(r, v) for r, v in f.items()], n_steps=2)
    assert len(m.instances) == 8
    sg = m.straggler
    assert sg is not None and sg.rank == 1
    assert sg.by_phase_ns == {"backward": 2 * (900 + 800 + 700) * US}
    assert sg.last_arrivals == 6 and sg.instances == 8
    assert sg.per_rank_caused_ns == {0: 2 * 20 * US, 1: 2 * 2400 * US}
    doc = sg.to_json()
    assert doc["caused_wait_ms_per_step"] == pytest.approx(2.4)
    assert "arrives last at 6 of 8" in sg.evidence


def test_the_straggler_sentence_says_gpu_time_when_several_ranks_wait():
    """Three ranks, one all-reduce per step (2 steps of 10 ms); rank 2 arrives 3 ms after rank 0
    and 1 ms after rank 1. The waits add up over GPUs (4 GPU·ms per step): only the rank that
    waits most (rank 0, 3 ms, 30 % of a step) is put against a step."""
    starts = {0: 0, 1: 2000, 2: 3000}
    frames = [
        frame(r, [{"start": st * 10_000 + s0, "end": st * 10_000 + 4000, "step": st}
                  for st in (1, 2)])
        for r, s0 in starts.items()
    ]  # fmt: skip
    sg = match_collectives(frames, n_steps=2, step_ns=10_000 * US).straggler
    assert sg is not None and sg.rank == 2 and sg.waiting_rank == 0
    assert sg.evidence == (
        "rank 2 arrives last at 2 of 2 matched collectives; 2 ranks wait for it, 4.00 GPU·ms per "
        "step in all (rank 0 the most: 3.00 ms per step (30% of a step)); by phase per step: "
        "backward 4.00 GPU·ms; most in step 1 (4.00 GPU·ms)."
    )
    # two ranks: one waits, in plain ms, against a step
    two = match_collectives(frames[1:], n_steps=2, step_ns=10_000 * US).straggler
    assert two is not None and two.evidence == (
        "rank 2 arrives last at 2 of 2 matched collectives; rank 1 has to wait 1.00 ms per step "
        "for it (10% of a step); by phase per step: backward 1.00 ms; most in step 1 (1.00 ms)."
    )


def test_no_straggler_below_the_threshold_or_alone():
    frames = [frame(0, [{"start": 0, "end": 100}]), frame(1, [{"start": 5, "end": 100}])]
    assert match_collectives(frames).straggler is None  # 5 µs per step < 100 µs
    assert match_collectives([frames[0]]).straggler is None


def test_unlaunched_kernels_are_counted_not_matched():
    f0 = frame(0, [{"start": 0, "end": 100, "launched": False}, {"start": 200, "end": 300}])
    f1 = frame(1, [{"start": 250, "end": 300}])
    m = match_collectives([f0, f1])
    assert m.unlaunched == {0: 1}
    assert len(m.instances) == 1 and m.instances.iloc[0]["missing"] == []


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(2, 8),
    k=st.integers(1, 12),
    planted=st.integers(0, 7),
    delay=st.integers(300, 3000),
    data=st.data(),
)
def test_planted_straggler_is_found_and_waits_match_brute_force(n, k, planted, delay, data):
    """Every rank arrives at each collective after its own noise (0-50 µs); the planted rank
    also after ``delay`` µs. The straggler found is the planted one, and every wait/transfer is
    the definition computed by brute force."""
    planted %= n
    frames = {r: [] for r in range(n)}
    arrivals = {}
    for i in range(k):
        base = i * 10_000
        starts = {
            r: base + data.draw(st.integers(0, 50)) + (delay if r == planted else 0)
            for r in range(n)
        }
        end = max(starts.values()) + data.draw(st.integers(1, 500))
        arrivals[i] = (starts, end)
        for r in range(n):
            frames[r].append({"start": starts[r], "end": end, "step": i})
    m = match_collectives([frame(r, v) for r, v in frames.items()], n_steps=k)
    assert m.straggler is not None and m.straggler.rank == planted
    first_row: dict[tuple[int, int], Any] = {}  # (step, rank) -> its first row, read once
    for row in m.rows.itertuples(index=False):
        first_row.setdefault((row.step, row.rank), row)
    for i, (starts, end) in arrivals.items():
        last = max(starts.values())
        for r in range(n):
            row = first_row[(i, r)]
            assert row.wait_ns == min(last - starts[r], end - starts[r]) * US
            assert row.transfer_ns == (end - max(starts[r], last)) * US
            assert row.last_rank == planted


# -- what Kineto writes -----------------------------------------------------------------------


def test_collective_from_args_torch_2_11_kernel():
    """The NCCL kernel args of the real DDP sample (torch 2.11): no Seq."""
    args = {
        "Collective name": "allreduce",
        "In msg nelems": 4194304,
        "Out msg nelems": 4194304,
        "Group size": 2,
        "dtype": "Float",
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": "[0, 1]",
    }
    got = collective_from_args(args, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)")
    assert got == {
        "pg": "0",
        "pg_size": 2,
        "seq": None,
        "coll": "allreduce",
        "peer": None,
        "dtype": "float",
        "msg_bytes": 4194304 * 4,
    }


def test_collective_from_args_variants():
    """torch 2.0 (no comm args: the kernel name), newer Kineto (Seq, _allgather_base), p2p."""
    old = collective_from_args({}, "ncclKernel_AllGather_RING_LL_Sum_bf16(ncclDevComm*)")
    assert old["coll"] == "allgather" and old["dtype"] == "bf16" and old["pg"] is None
    new = collective_from_args(
        {
            "Collective name": "_allgather_base",
            "dtype": "BFloat16",
            "In msg nelems": 65664,
            "Out msg nelems": 131328,
            "Group size": 2,
            "Process Group Name": "12341234",
            "Seq": 4242424242,
        },
    )
    assert new["coll"] == "allgather" and new["seq"] == 4242424242
    assert new["msg_bytes"] == 131328 * 2
    send = collective_from_args({"Collective name": "send", "Dst Rank": 3, "dtype": "Float"})
    recv = collective_from_args({"Collective name": "recv", "Src Rank": 2, "dtype": "Float"})
    assert (send["coll"], send["peer"], recv["coll"], recv["peer"]) == ("send", 3, "recv", 2)
    rs = collective_from_args({"Collective name": "reduce_scatter_tensor_coalesced"})
    assert rs["coll"] == "reducescatter"


@pytest.mark.parametrize(
    ("name", "coll", "dtype"),
    [
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "allreduce",
            "f32",
        ),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reducescatter", "bf16"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "sendrecv", None),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "broadcast", "int8_t"),
        ("ncclDevKernel_Reduce_Sum_f16_RING_LL", "reduce", "f16"),
        ("nccl:all_to_all", "alltoall", None),
        ("c10d::allreduce_", "allreduce", None),
    ],
)
def test_kernel_and_op_names(name, coll, dtype):
    assert coll_of(name) == coll
    assert dtype_of_kernel(name) == dtype


def test_sizes_from_input_dims():
    assert sizes_from_input_dims("[[[4194304]], [], []]") == (4194304, None)
    assert sizes_from_input_dims("[[[2, 3], [4]], [[40]]]") == (10, 40)
    assert sizes_from_input_dims("[[8, 8]]") == (64, None)
    assert sizes_from_input_dims("not json") == (None, None)


# -- from the store: hand-made traces -----------------------------------------------------------

KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def ddp_rank(rank: int, arrivals: list[float], ends: list[float], tmp: Path) -> Path:
    """Two steps of a DDP rank: step N at 0/10,000 µs; in each, a backward span holding one
    all-reduce (record_param_comms with a 1 M-element bucket) whose kernel starts at the given
    arrival; a compute kernel 100-400 µs of each step; on rank 0 an extra NCCL kernel (8000-8200
    µs) whose launch is not in the trace (queued before it began)."""
    t = TraceBuilder(rank=rank, world_size=2)
    for i, (arr, end) in enumerate(zip(arrivals, ends, strict=True)):
        base = i * 10_000.0
        t.step(i + 1, base, 9_000.0)
        t.launch("volta_sgemm_128x64_nn", base + 50, base + 100, 300.0, stream=7)
        t.cpu_op("autograd::engine::evaluate_function: AccumulateGrad", base + 500, 400.0)
        ext = t.cpu_op(
            "record_param_comms",
            base + 600,
            100.0,
            **{"Input Dims": [[[1048576]], [], []], "Input type": ["TensorList", "", ""]},
        )
        t.launch(KERNEL, base + 650, base + arr, end - arr, stream=17, external_id=ext)
    if rank == 0:
        t.gpu(KERNEL, 8_000.0, 200.0, correlation=99_999, stream=17)
    return t.write(tmp / f"r{rank}.json")


@pytest.fixture
def ddp_pair(con, tmp_path):
    from gpuscope.ingest.loader import ingest_paths

    d = tmp_path / "run"
    d.mkdir()
    # rank 0 arrives at 1000 µs, rank 1 at 3000 µs; both end at 3500 (step 1); step 2 the other way
    ddp_rank(0, [1000, 2000], [3500, 4000], d)
    ddp_rank(1, [3000, 1500], [3500, 4000], d)
    [res] = ingest_paths(con, [d])
    return res.run_id


@pytest.mark.slow
def test_rank_collectives_reads_one_rank(con, ddp_pair):
    f = rank_collectives(con, ddp_pair, 0)
    assert list(f.columns) == list(FRAME_COLUMNS)
    launched = f[f["launched"]]
    assert list(launched["coll"]) == ["allreduce", "allreduce"]
    assert list(launched["msg_bytes"]) == [1048576 * 4] * 2
    assert list(launched["phase"]) == ["backward", "backward"]
    assert list(launched["step"]) == [1, 2]
    assert list(launched["pg"]) == ["stream:17", "stream:17"]
    assert (~f["launched"]).sum() == 1  # queued before the trace


@pytest.mark.slow
def test_a_kernel_without_external_id_takes_the_innermost_comm_op_of_its_launching_thread(
    con, tmp_path
):
    """No External id on the kernel: its op is the shortest communication op around its launch
    call on the launching thread: the inner ``record_param_comms`` (256 f32 elements: 1,024 B),
    not the outer ``nccl:all_reduce`` (no dims) nor a shorter one on another thread (999)."""
    from gpuscope.ingest.loader import ingest_paths

    t = TraceBuilder(rank=0, world_size=2)
    t.step(1, 0.0, 9_000.0)
    t.cpu_op("nccl:all_reduce", 600.0, 300.0)
    dims = {"Input type": ["TensorList", "", ""]}
    t.cpu_op("record_param_comms", 620.0, 100.0, **{"Input Dims": [[[256]], [], []]}, **dims)
    t.cpu_op("record_param_comms", 640.0, 20.0, tid=2, **{"Input Dims": [[[999]], [], []]}, **dims)
    t.launch(KERNEL, 650.0, 1000.0, 200.0, stream=17)
    d = tmp_path / "run"
    d.mkdir()
    t.write(d / "r0.json")
    [res] = ingest_paths(con, [d])
    f = rank_collectives(con, res.run_id, 0)
    assert list(f["coll"]) == ["allreduce"]
    assert list(f["msg_bytes"]) == [256 * 4]
    assert list(f["step"]) == [1] and list(f["phase"]) == ["forward"]


@pytest.mark.slow
def test_run_collectives_and_busy_split_exact(con, ddp_pair):
    """Step 1: rank 0 waits 2000 µs (1000 -> 3000), both transfer 500 µs; step 2: rank 1 waits
    500 µs, rank 0 transfers 2000 µs; the kernel without a launch is unmatched (200 µs). The
    split sums exactly to rank 0's window."""
    from gpuscope.analysis.busy import busy_split
    from gpuscope.analysis.steps import find_window

    m = run_collectives(con, ddp_pair)
    assert m.unlaunched == {0: 1}
    waits = m.wait_ns_by_rank()
    assert waits == {0: 2000 * US, 1: 500 * US}
    assert list(m.instances["transfer_ns"]) == [500 * US, 2000 * US]
    assert m.straggler is not None and m.straggler.rank == 1
    w = find_window(con, ddp_pair, 0)
    mine = m.rows[m.rows["rank"] == 0]
    off = con.execute(
        "SELECT time_offset_ns FROM ranks WHERE run_id = ? AND rank = 0", [ddp_pair]
    ).fetchone()[0]
    waits_df = pd.DataFrame(
        {
            "start_ns": mine["start_ns"] - off,
            "end_ns": mine["end_ns"] - off,
            "wait_ns": mine["wait_ns"],
        }
    )
    sp = busy_split(con, ddp_pair, 0, w.start_ns, w.end_ns, 0, waits_df)
    assert sp.compute_ns == 2 * 300 * US
    assert sp.wait_ns == 2000 * US
    # transfer: step 1 500 µs, step 2 2000 µs (the whole kernel: no wait on rank 0)
    assert sp.transfer_ns == (500 + 2000) * US
    assert sp.unmatched_comm_kernels == 1 and sp.unmatched_ns == 200 * US
    assert sp.busy_ns + sp.idle_ns == w.duration_ns


# -- busy, split (compute / transfer / wait / unmatched / idle) ---------------------------------


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    compute=st.lists(st.tuples(st.integers(0, 190), st.integers(1, 40)), max_size=5),
    comm=st.lists(
        st.tuples(st.integers(0, 190), st.integers(1, 60), st.integers(-1, 60)), max_size=5
    ),
)
def test_busy_split_and_wait_series_against_brute_force(tmp_path_factory, compute, comm):
    """Random compute kernels and NCCL kernels (each matched with a wait, or unmatched: -1) on one
    device, window 0-200 µs: every µs is classed by the precedence compute > transfer > wait >
    unmatched > idle, and the split and the per-bucket wait equal that count."""
    from gpuscope.analysis.busy import busy_split, wait_series
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    t = TraceBuilder()
    t.step(1, 0.0, 200.0)
    for s, d in compute:
        t.launch("volta_sgemm_128x64_nn", s, s, d, stream=7)
    for s, d, _ in comm:
        t.launch(KERNEL, s, s, d, stream=17)
    path = t.write(tmp_path_factory.mktemp("split") / "t.json")
    con = connect(":memory:")
    try:
        [res] = ingest_paths(con, [path])
        waits = pd.DataFrame(
            {
                "start_ns": [s * US for s, d, w in comm if w >= 0],
                "end_ns": [(s + d) * US for s, d, w in comm if w >= 0],
                "wait_ns": [min(w, d) * US for s, d, w in comm if w >= 0],
            }
        )
        sp = busy_split(con, res.run_id, 0, 0, 200 * US, 0, waits)
        series = wait_series(con, res.run_id, 0, 0, 200 * US, 8, 0, waits)
    finally:
        con.close()
    cls = []
    for u in range(200):

        def on(a, b, u=u):
            return a <= u < b

        if any(on(s, s + d) for s, d in compute):
            cls.append("compute")
        elif any(on(s + min(w, d), s + d) for s, d, w in comm if w >= 0):
            cls.append("transfer")
        elif any(on(s, s + min(w, d)) for s, d, w in comm if w >= 0):
            cls.append("wait")
        elif any(on(s, s + d) for s, d, w in comm if w < 0):
            cls.append("unmatched")
        else:
            cls.append("idle")
    for k in ("compute", "transfer", "wait", "unmatched", "idle"):
        assert getattr(sp, f"{k}_ns") == cls.count(k) * US, k
    per_bucket = [cls[i * 25 : (i + 1) * 25].count("wait") * US for i in range(8)]
    assert list(series["wait_ns"]) == per_bucket


@pytest.mark.slow
def test_wait_series_sums_to_the_split(con, ddp_pair):
    from gpuscope.analysis.busy import busy_split
    from gpuscope.analysis.collectives import wait_in_view
    from gpuscope.analysis.steps import find_window

    m = run_collectives(con, ddp_pair)
    w = find_window(con, ddp_pair, 0)
    from gpuscope.analysis.collectives import wait_table

    sp = busy_split(con, ddp_pair, 0, w.start_ns, w.end_ns, 0, wait_table(con, ddp_pair, 0, m))
    series = wait_in_view(con, ddp_pair, 0, 0, w.start_ns, w.end_ns, 70, m)
    assert int(series["wait_ns"].sum()) == sp.wait_ns == 2000 * US
    # the wait is 1000-3000 µs of step 1; the window starts at 0
    assert series.loc[series["wait_ns"] > 0, "start_ns"].min() < 3000 * US
    assert wait_in_view(con, ddp_pair, 0, 0, w.start_ns, w.end_ns, 70, None)["wait_ns"].sum() == 0


@settings(max_examples=300, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30)), max_size=12),
    times=st.lists(st.integers(-5, 100), max_size=12),
)
def test_inside_any_is_some_span_holding_the_time(spans, times) -> None:
    """The phase test of a kernel (a backward or optimizer span holds its launch, ends included),
    vectorised, against a loop over the spans."""
    import numpy as np
    from gpuscope.analysis.collectives import _inside_any

    s = np.array([a for a, _ in spans], dtype=np.int64)
    e = np.array([a + d for a, d in spans], dtype=np.int64)
    t = np.array(times, dtype=np.int64)
    want = [any(a <= x <= b for a, b in zip(s, e, strict=True)) for x in times]
    assert _inside_any(s, e, t).tolist() == want


@pytest.mark.slow
def test_only_communication_ops_carry_their_name_and_dims(con, ddp_pair):
    """The backward and optimizer spans that place a rank's kernels are read as times alone:
    names and input dims only for the communication ops (a 1 GB rank's 137 k backward spans
    held 10 MB of names)."""
    from gpuscope.analysis.collectives import _frame_rows
    from gpuscope.analysis.rank_index import RankIndex

    _, ops = _frame_rows(con, RankIndex.shared(con, ddp_pair, 0), ddp_pair, [0])
    rows = ops[0].to_pylist()
    spans = [r for r in rows if r["kind"] != 0]
    comm = [r for r in rows if r["kind"] == 0]
    assert spans and comm
    assert all(r["name"] is None and r["input_dims"] is None for r in spans)
    assert all(r["name"] == "record_param_comms" for r in comm)
