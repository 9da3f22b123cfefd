"""Bytes, algorithm and bus bandwidth of every collective kind read from the store (issue 43 item
3): all-gather, reduce-scatter, all-to-all and send/recv as well as all-reduce, from the
``Input Dims`` / ``Input type`` / ``Concrete Inputs`` that torch 2.2-2.11 writes on
``record_param_comms`` and the ``nccl:*`` ops; hand-made 2-rank traces with answers by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis.collectives import (
    collective_from_args,
    dtype_from_input_types,
    dtype_key,
    group_size_from_params,
    rank_collectives,
    run_collectives,
)
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

#: ``record_param_comms``' parameter layout since torch 2.2 (the DDP sample's, torch 2.11):
#: tensors, seq, pg name, rank, coll name, in splits, out splits, rank start, stride, world size.
RPC_TYPES_LIST = ["TensorList", "", "", "Scalar", "", "ScalarList", "ScalarList"] + ["Scalar"] * 3


def rpc_args(dims: list, tensor_type: str, rank: int, world: int = 2) -> dict:
    types = [tensor_type, *RPC_TYPES_LIST[1:]]
    conc = ["", "", "", str(rank), "", "[]", "[]", "0", "1", str(world)]
    return {
        "Input Dims": [dims, [], [], [], [], [], [], [], [], []],
        "Input type": types,
        "Concrete Inputs": conc,
    }


def fsdp_rank(rank: int, tmp: Path) -> Path:
    """One step (0-9,000 µs) of a 2-rank job with four kinds of communication, each on its own
    stream, the kernel launched inside ``nccl:<op>`` inside ``record_param_comms`` (no External
    id on the kernel, as in torch 2.11):

    - all-gather of a 1,000,000-element bf16 shard (``_allgather_base``; the AllGather kernel names
      no dtype): rank 0 arrives at 1,000 µs, rank 1 at 1,100 µs, both end at 1,500 µs;
    - reduce-scatter of a 2,000,000-element bf16 input: both 2,000-2,200 µs;
    - all-to-all of 500,000 f32 elements (NCCL runs it as a SendRecv kernel): 3,000-3,100 µs;
    - rank 0 sends 250,000 f32 elements to rank 1 (its ``nccl:send``, rank 1's ``nccl:recv``):
      4,000-4,100 µs."""
    t = TraceBuilder(rank=rank, world_size=2)
    t.step(1, 0.0, 9_000.0)
    t.launch("volta_sgemm_128x64_nn", 10.0, 100.0, 300.0, stream=7)

    def comm(op: str, t0: float, dims: list, ttype: str, kernel: str, k0: float, k1: float, s: int):
        t.cpu_op("record_param_comms", t0, 60.0, **rpc_args(dims, ttype, rank))
        t.cpu_op(op, t0 + 10, 40.0, **{"Input Dims": [dims], "Input type": [ttype]})
        t.launch(kernel, t0 + 20, k0, k1 - k0, stream=s)

    ag0 = 1_000.0 if rank == 0 else 1_100.0
    comm(
        "nccl:_all_gather_base",
        500.0,
        [1_000_000],
        "c10::BFloat16",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        ag0,
        1_500.0,
        21,
    )
    comm(
        "nccl:_reduce_scatter_base",
        1_600.0,
        [2_000_000],
        "c10::BFloat16",
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        2_000.0,
        2_200.0,
        23,
    )
    comm(
        "nccl:all_to_all",
        2_600.0,
        [500_000],
        "float",
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        3_000.0,
        3_100.0,
        25,
    )
    comm(
        "nccl:send" if rank == 0 else "nccl:recv",
        3_600.0,
        [250_000],
        "float",
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        4_000.0,
        4_100.0,
        27,
    )
    return t.write(tmp / f"r{rank}.json")


@pytest.fixture
def fsdp_pair(con, tmp_path):
    from gpuscope.ingest.loader import ingest_paths

    d = tmp_path / "run"
    d.mkdir()
    fsdp_rank(0, d)
    fsdp_rank(1, d)
    [res] = ingest_paths(con, [d])
    return res.run_id


@pytest.mark.slow
def test_every_kind_has_bytes_group_size_and_dtype_from_the_store(con, fsdp_pair):
    """By hand: all-gather S = 2 x 1,000,000 x 2 B = 4,000,000 (the output); reduce-scatter
    S = 2,000,000 x 2 B = 4,000,000 (the input); all-to-all 500,000 x 4 B = 2,000,000; send/recv
    250,000 x 4 B = 1,000,000. Group size 2 from the last Concrete Input."""
    f = rank_collectives(con, fsdp_pair, 0).set_index("stream")
    assert f.loc[21, "coll"] == "allgather" and f.loc[21, "dtype"] == "bfloat16"
    assert f.loc[23, "coll"] == "reducescatter" and f.loc[23, "dtype"] == "bf16"
    assert f.loc[25, "coll"] == "alltoall" and f.loc[25, "dtype"] == "float"
    assert f.loc[27, "coll"] == "send"
    assert rank_collectives(con, fsdp_pair, 1).set_index("stream").loc[27, "coll"] == "recv"
    assert {s: int(f.loc[s, "msg_bytes"]) for s in (21, 23, 25, 27)} == {
        21: 4_000_000,
        23: 4_000_000,
        25: 2_000_000,
        27: 1_000_000,
    }
    assert set(f["pg_size"]) == {2}


@pytest.mark.slow
def test_bus_bandwidth_of_every_kind_by_hand(con, fsdp_pair):
    """Transfer = end - last arrival: all-gather 1,500 - 1,100 = 400 µs -> algbw 4e6 B / 400 µs =
    10 GB/s, bus x (2-1)/2 = 5 GB/s; reduce-scatter 200 µs -> 20 GB/s, bus 10; all-to-all 100 µs
    -> 20 GB/s, bus x 1/2 = 10; send/recv 100 µs -> 10 GB/s, bus x 1 = 10. Rank 0 waits 100 µs
    at the all-gather, rank 1 is its last arriver."""
    m = run_collectives(con, fsdp_pair)
    inst = m.instances.set_index("coll")
    assert sorted(inst.index) == ["allgather", "alltoall", "reducescatter", "send"]
    want = {
        "allgather": (10.0, 5.0),
        "reducescatter": (20.0, 10.0),
        "alltoall": (20.0, 10.0),
        "send": (10.0, 10.0),
    }
    for coll, (alg, bus) in want.items():
        assert inst.loc[coll, "algbw_gbs"] == pytest.approx(alg), coll
        assert inst.loc[coll, "busbw_gbs"] == pytest.approx(bus), coll
    assert int(inst.loc["allgather", "last_rank"]) == 1
    assert int(inst.loc["allgather", "wait_ns"]) == 100_000


def test_dtype_spellings_of_args_and_input_types():
    assert dtype_key("c10::BFloat16") == "bfloat16"
    assert dtype_key("Float") == "float" and dtype_key("c10::Half") == "half"
    assert dtype_key("long int") == "long int" and dtype_key("Long") == "long"
    assert dtype_key("c10::Float8_e4m3fn") == "float8_e4m3fn"
    assert dtype_key("TensorList") is None and dtype_key("") is None
    assert dtype_from_input_types('["TensorList", "", ""]') is None
    assert dtype_from_input_types('["c10::BFloat16", "", "Scalar"]') == "bfloat16"
    assert dtype_from_input_types("not json") is None


def test_group_size_only_where_the_layout_puts_it():
    """torch >= 2.2: the last of ten parameters (the DDP sample: 2); torch 2.0-2.1 (seven, ending
    with the split sizes) has none; a mismatch of the two lists gives none."""
    a = rpc_args([[1]], "TensorList", 0, world=8)
    import json

    assert (
        group_size_from_params(json.dumps(a["Input type"]), json.dumps(a["Concrete Inputs"])) == 8
    )
    old_t = ["TensorList", "", "", "Scalar", "", "ScalarList", "ScalarList"]
    old_c = ["", "", "", "0", "", "[]", "[]"]
    assert group_size_from_params(json.dumps(old_t), json.dumps(old_c)) is None
    assert group_size_from_params(json.dumps(old_t), json.dumps(old_c[:-1])) is None
    assert group_size_from_params(None, None) is None


def test_args_of_every_kind():
    """The raw args (a reader of the trace): all-to-all(v) S = its input, send/recv too, an
    all-gather's dtype given as ``c10::BFloat16``."""
    a2a = collective_from_args(
        {"Collective name": "all_to_allv", "In msg nelems": 1000, "dtype": "Float", "Group size": 4}
    )
    assert (a2a["coll"], a2a["msg_bytes"]) == ("alltoall", 4000)
    ag = collective_from_args(
        {
            "Collective name": "_allgather_base",
            "In msg nelems": 10,
            "dtype": "c10::BFloat16",
            "Group size": 4,
        }
    )
    assert (ag["coll"], ag["dtype"], ag["msg_bytes"]) == ("allgather", "bfloat16", 80)
    send = collective_from_args({"Collective name": "send", "In msg nelems": 5, "dtype": "Half"})
    assert send["msg_bytes"] == 10


@pytest.mark.slow
def test_real_fsdp2_allgathers_have_bytes_and_bus_bandwidth(con):
    """The real FSDP2 pair (sample_traces/multi_gpu/fsdp_noprefetch, 2 x H100, torch 2.11): its
    ``_allgather_base`` record_param_comms says In/Out msg nelems 25,169,920 / 50,339,840, bf16,
    group size 2 (the args the store does not keep): from Input Dims, Input type and Concrete
    Inputs we read the same S = 50,339,840 x 2 B; the reduce-scatter (fp32 reduce) 50,339,840 x 4 B;
    both with a bus bandwidth (none before: "-")."""
    from gpuscope.ingest.loader import ingest_paths

    d = Path(__file__).parent.parent / "sample_traces" / "multi_gpu" / "fsdp_noprefetch"
    [res] = ingest_paths(con, [d])
    m = run_collectives(con, res.run_id)
    inst = m.instances
    ag = inst[inst["coll"] == "allgather"]
    rs = inst[inst["coll"] == "reducescatter"]
    assert int(ag["msg_bytes"].median()) == 50_339_840 * 2
    assert int(rs["msg_bytes"].median()) == 50_339_840 * 4
    assert ag["busbw_gbs"].notna().all() and rs["busbw_gbs"].notna().all()
    assert set(rank_collectives(con, res.run_id, 0)["pg_size"].dropna()) == {2}
