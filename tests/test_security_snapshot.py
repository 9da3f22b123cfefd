"""The memory-snapshot reader under hostile pickles (issue 47, items 2, 3 and 11): bounded depth,
memory and work, every refusal one line naming the file, no traceback, nothing stored.

The payloads are the probe's, written opcode by opcode where ``pickle.dumps`` cannot make them:
a tuple nested 200,000 deep as a dict key (the C stack overflowed hashing it: SIGSEGV), segments
and blocks shared by reference (n² summary work), BINBYTES8 of 2**63 bytes and BUILD on a list
(tracebacks). A property test feeds random opcode streams and mutated real snapshots.
"""

from __future__ import annotations

import json
import pickle
import random
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.memory_snapshot import (
    MAX_DEPTH,
    MAX_STACK,
    check_plain,
    load_plain,
    read_snapshot,
    snapshot_summary,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "memory"
REAL = SAMPLE / "gpt_mem.snapshot.pickle"
FAST_S = 5.0  # a refusal or a small file takes milliseconds; this allows a loaded 2-core VM


def deep_key(depth: int = 200_000) -> bytes:
    """``{"segments": [], ((((None,),),)...): 1}``, the key nested ``depth`` tuples deep (TUPLE1
    opcodes: 1 byte a level, 200 KB in all)."""
    return (
        b"\x80\x04}(\x8c\x08segments]"  # PROTO 4, EMPTY_DICT, MARK, "segments", EMPTY_LIST
        + b"N"
        + b"\x85" * depth  # None, TUPLE1 x depth
        + b"K\x01u."  # 1, SETITEMS, STOP
    )


def shared_bomb(n: int) -> bytes:
    """``{"segments": [S] * n}``, ``S = {"blocks": [B] * n}``: n² blocks to walk, 4n bytes."""
    block = {"state": "inactive", "size": 1}
    seg = {"device": 0, "total_size": 1, "blocks": [block] * n}
    return pickle.dumps({"segments": [seg] * n}, protocol=4)


BINBYTES8_2_63 = b"\x80\x04\x8e" + struct.pack("<Q", 1 << 63) + b"."
BUILD_ON_LIST = b"\x80\x04]}b."  # EMPTY_LIST, EMPTY_DICT, BUILD, STOP


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail the test if the block runs longer than ``seconds`` (SIGALRM interrupts Python code)."""

    def late(_sig: int, _frame: Any) -> None:
        raise AssertionError(f"took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def refusal(name: str, data: bytes) -> str:
    """read_snapshot's one-line IngestError for ``data``, in at most FAST_S seconds."""
    with within(FAST_S), pytest.raises(IngestError) as e:
        read_snapshot(name, data)
    msg = str(e.value)
    assert msg.startswith(f"{name}: ") and "\n" not in msg, msg
    return msg


class _Upload:
    """What st.file_uploader hands over: a named binary stream."""

    def __init__(self, name: str, data: bytes) -> None:
        import io

        self.name, self._b = name, io.BytesIO(data)

    def read(self, size: int = -1, /) -> bytes:
        return self._b.read(size)

    def seek(self, offset: int, whence: int = 0, /) -> int:
        return self._b.seek(offset, whence)


def small_trace() -> TraceBuilder:
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch("gemm", 1, 10, 20)
    return t


PAYLOADS = {
    "deep.pickle": (deep_key(), "nested more than"),
    "bomb40k.pickle": (shared_bomb(10_000), "would visit more than"),
    "bomb400k.pickle": (shared_bomb(100_000), "would visit more than"),
    "binbytes8.pickle": (BINBYTES8_2_63, "past the end of the 12-byte file"),
    "build.pickle": (BUILD_ON_LIST, "it uses BUILD"),
}


def test_probe_payload_sizes() -> None:
    """The payloads are the probe's: 200 KB deep, 40 KB and 400 KB bombs."""
    assert 200_000 < len(PAYLOADS["deep.pickle"][0]) < 201_000
    assert 40_000 < len(PAYLOADS["bomb40k.pickle"][0]) < 41_000
    assert 400_000 < len(PAYLOADS["bomb400k.pickle"][0]) < 401_000


# The deep key overflowed the C stack of the process that read it: those tests run it in a child.
IN_PROCESS = [name for name in PAYLOADS if name != "deep.pickle"]


def in_child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter (tests/ on its path): a crash is its exit code."""
    tests = str(Path(__file__).resolve().parent)
    code = f"import sys; sys.path.insert(0, {tests!r})\n{script}"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", IN_PROCESS)
def test_probe_payloads_refused_in_one_line_fast(name: str) -> None:
    data, says = PAYLOADS[name]
    t0 = time.perf_counter()
    msg = refusal(name, data)
    assert says in msg, msg
    assert time.perf_counter() - t0 < FAST_S


@pytest.mark.parametrize("name", IN_PROCESS)
def test_upload_of_a_probe_payload_stores_nothing(con, tmp_path: Path, name: str) -> None:
    """The dashboard's upload path: the same one line (shown in the error box), no run stored."""
    from gpuscope.web.uploads import ingest_uploads

    trace = small_trace().write(tmp_path / "t.json")
    files = [_Upload("t.json", trace.read_bytes()), _Upload(name, PAYLOADS[name][0])]
    with within(FAST_S), pytest.raises(IngestError) as e:
        ingest_uploads(con, files)
    assert str(e.value).startswith(f"{name}: ") and "\n" not in str(e.value)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


_UPLOAD_DEEP = """
import time
from pathlib import Path
from gpuscope.ingest.errors import IngestError
from gpuscope.store import connect
from gpuscope.web.uploads import ingest_uploads
from test_security_snapshot import _Upload, deep_key, small_trace

tmp = Path(sys.argv[1])
con = connect(tmp / "store")
trace = small_trace().write(tmp / "t.json").read_bytes()
t0 = time.perf_counter()
try:
    ingest_uploads(con, [_Upload("t.json", trace), _Upload("deep.pickle", deep_key())])
except IngestError as e:
    print(f"{time.perf_counter() - t0:.3f}")
    print(e)
print(con.execute("SELECT count(*) FROM runs").fetchone()[0])
"""


@pytest.mark.slow
def test_upload_of_the_deep_key_refused_in_one_line(tmp_path: Path) -> None:
    """The dashboard's upload path (one process for every user): the deep key is one line for
    the error box, fast, and no run is stored; the process lives on (it died of SIGSEGV)."""
    r = in_child(_UPLOAD_DEEP, str(tmp_path))
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    took, msg, runs = r.stdout.strip().splitlines()
    assert msg.startswith("deep.pickle: refused: containers nested more than"), msg
    assert float(took) < FAST_S and runs == "0"


@pytest.mark.slow
def test_cli_refuses_the_deep_key_in_one_line(tmp_path: Path) -> None:
    """``gpuscope ingest TRACE deep.pickle`` exited 139 (SIGSEGV hashing the key); now exit 2,
    one line on stderr, no traceback, and the store keeps exactly the run it had."""
    trace = small_trace().write(tmp_path / "t.json")
    other = small_trace()
    other.launch("relu", 2, 40, 5)
    first = other.write(tmp_path / "first.json")
    deep = tmp_path / "deep.pickle"
    deep.write_bytes(deep_key())
    db = tmp_path / "store"

    def gpuscope(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "gpuscope", *args, "--db", str(db)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    assert gpuscope("ingest", str(first)).returncode == 0
    before = json.loads(gpuscope("runs", "--json").stdout)
    r = gpuscope("ingest", str(trace), str(deep))
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "deep.pickle" in lines[0] and "nested more than" in lines[0], (
        r.stderr
    )
    assert "Traceback" not in r.stderr
    assert json.loads(gpuscope("runs", "--json").stdout) == before and len(before) == 1


def test_depth_cap_is_before_any_object_is_built() -> None:
    """Nesting refused by the opcode walk, never built: the cap holds for lists and dicts too,
    and the deepest nesting allowed still reads."""
    deep = b"N" + b"\x85" * MAX_DEPTH  # MAX_DEPTH tuples around None
    assert check_plain(b"\x80\x04" + deep + b".") is None
    assert load_plain(b"\x80\x04" + deep + b".") is not None
    for too_deep in (
        deep + b"\x85",  # one more tuple
        b"}(\x8c\x08segments]" + deep + b"\x85K\x01u",  # the probe's key, 101 deep
        b"]" + deep + b"a",  # a list holding it
        b"}\x8c\x01k" + deep + b"s",  # a dict value
    ):
        msg = refusal("d.pickle", b"\x80\x04" + too_deep + b".")
        assert f"nested more than {MAX_DEPTH} deep" in msg


def test_keys_that_could_collide_are_refused() -> None:
    """Integers that all hash alike (multiples of 2**61 - 1) as dict keys made inserting
    quadratic; a dict key or set item is a string, bytes, a 32-bit int, a bool or None."""
    p = (1 << 61) - 1
    body = b"".join(
        b"\x8a\x0a" + (k * p).to_bytes(10, "little", signed=True) + b"N" for k in range(1, 20_001)
    )
    data = b"\x80\x04}(\x8c\x08segments]\x8c\x01x}(" + body + b"uu."  # {"segments": [], "x": {...}}
    msg = refusal("collide.pickle", data)
    assert "a dict key that is not a string" in msg
    for key in (b"G" + b"\0" * 8, b")", b"N\x85", b"(\x91"):  # float, tuple, frozenset keys
        assert "dict key" in refusal("k.pickle", b"\x80\x04}" + key + b"Ns.")


def test_memory_amplification_refused() -> None:
    """One byte of ``}`` builds a 64-byte dict: 4 MB of them, a list of 4 million empty
    segments, is about 256 MB of objects, refused before any is built."""
    batch = b"(" + b"}" * 1000 + b"e"  # appended 1000 at a time, as pickle.dumps does
    data = b"\x80\x04}\x8c\x08segments]" + batch * 4000 + b"s."
    msg = refusal("empties.pickle", data)
    assert "MiB of objects" in msg


def test_memo_index_far_beyond_use_refused() -> None:
    """LONG_BINPUT 0xFFFFFFF0 made the C unpickler size its memo for 2**33 entries (64 GB)."""
    msg = refusal("memo.pickle", b"\x80\x04Nr\xf0\xff\xff\xff.")
    assert "memo index" in msg


def test_stack_and_open_marks_bounded() -> None:
    """3 MB of None left on the stack (8 bytes a byte in both unpicklers' stacks) and MARKs
    opened without end are refused while walking."""
    msg = refusal("nones.pickle", b"\x80\x04" + b"N" * 3_000_000 + b".")
    assert f"more than {MAX_STACK} values on the stack" in msg
    msg = refusal("marks.pickle", b"\x80\x04" + b"N(" * (MAX_DEPTH + 5) + b".")
    assert f"more than {MAX_DEPTH} MARKs open" in msg


def test_summary_budget_counts_work_not_sharing() -> None:
    """Shared references within one entry per byte still read (the budget counts visits), and a
    summary without a budget walks them all as before."""
    block = {"state": "inactive", "size": 7}
    seg = {"device": 0, "total_size": 10, "blocks": [block] * 3}
    snap = {"segments": [seg] * 3}
    s = read_snapshot("small.pickle", pickle.dumps(snap))
    assert s["devices"]["0"]["free_blocks"] == 9 and s["devices"]["0"]["reserved_bytes"] == 30
    assert snapshot_summary("x", snap) == s | {"file": "x"}
    with pytest.raises(IngestError, match="would visit more than 5 entries"):
        snapshot_summary("x.pickle", snap, max_visits=5)


def test_odd_numbers_count_zero_not_a_traceback() -> None:
    """inf, nan and integers beyond 2**63 as sizes or devices read 0, as non-numbers do; blocks
    that are not a list are skipped."""
    snap = {
        "segments": [
            {
                "device": 10**5000,
                "total_size": float("inf"),
                "allocated_size": float("nan"),
                "active_size": 1 << 70,
                "blocks": 5,
            },
            {"device": 0, "total_size": 3, "blocks": [{"state": "inactive", "size": -(1 << 64)}]},
        ],
        "device_traces": [[{"action": "alloc"}, {"action": 3}], 7],
    }
    s = read_snapshot("odd.pickle", pickle.dumps(snap))
    assert s["devices"] == {
        "0": {
            "segments": 2,
            "reserved_bytes": 3,
            "allocated_bytes": 0,
            "active_bytes": 0,
            "largest_free_block_bytes": 0,
            "free_blocks": 1,
        },
    }
    assert s["actions"] == {"alloc": 1}
    many = {"segments": [], "device_traces": [[{"action": f"a{i}"} for i in range(100)]]}
    assert "kinds of allocator action" in refusal("many.pickle", pickle.dumps(many))


def _reference_summary(snap: dict[str, Any]) -> dict[str, Any]:
    """The summary as gpuscope 0.2 computed it (a plain walk, no bounds): what valid snapshots
    must keep reading as."""
    devices: dict[int, dict[str, int]] = {}
    for seg in snap["segments"]:
        d = devices.setdefault(
            seg["device"],
            dict.fromkeys(
                (
                    "segments",
                    "reserved_bytes",
                    "allocated_bytes",
                    "active_bytes",
                    "largest_free_block_bytes",
                    "free_blocks",
                ),
                0,
            ),
        )
        d["segments"] += 1
        d["reserved_bytes"] += seg["total_size"]
        d["allocated_bytes"] += seg["allocated_size"]
        d["active_bytes"] += seg["active_size"]
        for b in seg["blocks"]:
            if b["state"] == "inactive":
                d["free_blocks"] += 1
                d["largest_free_block_bytes"] = max(d["largest_free_block_bytes"], b["size"])
    actions: dict[str, int] = {}
    for tr in snap["device_traces"]:
        for a in tr:
            actions[a["action"]] = actions.get(a["action"], 0) + 1
    return {
        "devices": {str(k): v for k, v in sorted(devices.items())},
        "actions": dict(sorted(actions.items())),
    }


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_real_snapshot_reads_as_before_in_every_protocol(protocol: int) -> None:
    """The sample snapshot, pickled with each protocol (0's text opcodes to 5's frames), loads
    to the very object pickle.loads gives and summarises as the unbounded walk did."""
    snap = pickle.loads(REAL.read_bytes())
    data = REAL.read_bytes() if protocol == 4 else pickle.dumps(snap, protocol=protocol)
    assert load_plain(data) == snap
    s = read_snapshot(REAL.name, data)
    assert s == {"file": REAL.name, **_reference_summary(snap)}
    assert s["devices"]["0"]["segments"] == 43


# ----- property test: random and adversarial opcode streams -----

_ALL_OPS = sorted({op.code.encode("latin-1") for op in __import__("pickletools").opcodes})
_LENGTHS = [0, 1, 2, 7, 255, 256, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 63, (1 << 64) - 1]


def _sized(op: bytes, length: int, payload: bytes) -> bytes:
    width = {
        b"T": 4,
        b"X": 4,
        b"B": 4,
        b"\x8b": 4,
        b"\x8d": 8,
        b"\x8e": 8,
        b"\x96": 8,
        b"\x95": 8,
        b"U": 1,
        b"C": 1,
        b"\x8c": 1,
        b"\x8a": 1,
    }[op]
    return op + (length % (1 << (8 * width))).to_bytes(width, "little") + payload


_token = st.one_of(
    st.sampled_from(_ALL_OPS),  # any opcode, bare
    st.builds(
        _sized,
        st.sampled_from(
            [
                b"T",
                b"X",
                b"B",
                b"\x8b",
                b"\x8d",
                b"\x8e",
                b"\x96",
                b"\x95",
                b"U",
                b"C",
                b"\x8c",
                b"\x8a",
            ]
        ),
        st.sampled_from(_LENGTHS) | st.integers(0, 12),
        st.binary(max_size=12),
    ),
    st.builds(
        lambda op, i: op + i, st.sampled_from([b"h", b"q", b"K"]), st.binary(min_size=1, max_size=1)
    ),
    st.builds(
        lambda op, i: op + struct.pack("<I", i),
        st.sampled_from([b"j", b"r", b"J"]),
        st.sampled_from([0, 1, 5, 1024, 1 << 20, (1 << 32) - 1]),
    ),
    st.builds(
        lambda op, n: op + str(n).encode() + b"\n",
        st.sampled_from([b"g", b"p", b"I", b"L"]),
        st.integers(-3, 10**6),
    ),
    st.sampled_from([b"N" + b"\x85" * k for k in (MAX_DEPTH - 1, MAX_DEPTH + 1, 5000, 200_000)]),
    st.sampled_from(
        [
            b"\x8c\x08segments",
            b"\x8c\x06blocks",
            b"\x8c\x05state",
            b"\x8c\x08inactive",
            b"cos\nsystem\n",
            b"\x8c\x05posix\x8c\x06system\x93",
        ]
    ),
    st.binary(min_size=1, max_size=4),
)


def _small_real() -> bytes:
    snap = pickle.loads(REAL.read_bytes())
    snap["segments"] = snap["segments"][:4]
    snap["device_traces"] = [tr[:6] for tr in snap["device_traces"]]
    return pickle.dumps(snap, protocol=4)


_BASES = [_small_real(), pickle.dumps(pickle.loads(_small_real()), protocol=0), shared_bomb(30)]


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    b = bytearray(draw(st.sampled_from(_BASES)))
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(b)))
        kind = draw(st.sampled_from(["flip", "insert", "delete", "dup"]))
        if kind == "flip" and i < len(b):
            b[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            b[i:i] = draw(_token)
        elif kind == "delete":
            del b[i : i + draw(st.integers(1, 16))]
        else:
            j = draw(st.integers(i, min(len(b), i + 64)))
            b[j:j] = b[i:j] * draw(st.integers(1, 50))
    return bytes(b)


_stream = st.builds(
    lambda proto, toks, stop: proto + b"".join(toks) + stop,
    st.sampled_from([b"", b"\x80\x02", b"\x80\x04", b"\x80\x05"]),
    st.lists(_token, max_size=60),
    st.sampled_from([b".", b"", b"u.", b"e."]),
)


@pytest.mark.slow
@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.one_of(_stream, _mutated()))
def test_any_pickle_reads_or_is_refused_in_one_line_within_budget(data: bytes) -> None:
    """Never a crash, never longer than the budget, never an exception but IngestError; and what
    the opcode walk admits builds exactly what pickle.loads builds."""
    t0 = time.perf_counter()
    with within(FAST_S):
        try:
            s = read_snapshot("fuzz.pickle", data)
        except IngestError as e:
            assert str(e).startswith("fuzz.pickle: ") and "\n" not in str(e)
        else:
            assert set(s) == {"file", "devices", "actions"}
    assert time.perf_counter() - t0 < FAST_S
    try:
        admitted = check_plain(data) is None
    except pickle.UnpicklingError:
        admitted = False
    if admitted and len(data) < 50_000:
        try:
            plain = pickle.loads(data)  # safe: nothing to import, nesting within MAX_DEPTH
        except (ValueError, pickle.UnpicklingError):
            return  # a bad number or text inside a well-formed stream: both refuse it
        assert _same(load_plain(data), plain)


def _same(a: Any, b: Any) -> bool:
    """Equal, with nan equal to itself, walked without recursion: a list may hold itself (the
    memo lets a pickle append a list to itself), so pairs already compared are skipped."""
    todo, seen = [(a, b)], set()
    while todo:
        x, y = todo.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, float):
            if not (x == y or (x != x and y != y)):
                return False
        elif isinstance(x, list | tuple | dict):
            if (id(x), id(y)) in seen:
                continue
            seen.add((id(x), id(y)))
            if len(x) != len(y):
                return False
            if isinstance(x, dict):
                if x.keys() != y.keys():
                    return False
                todo.extend((x[k], y[k]) for k in x)
            else:
                todo.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def test_random_real_mutations_seeded() -> None:
    """A fixed-seed sweep of single-byte changes to a real snapshot (no hypothesis shrinking,
    so it also runs in ``make test-fast``): each reads or is refused in one line."""
    base = _small_real()
    rng = random.Random(47)
    for _ in range(300):
        b = bytearray(base)
        b[rng.randrange(len(b))] = rng.randrange(256)
        with within(FAST_S):
            try:
                read_snapshot("m.pickle", bytes(b))
            except IngestError as e:
                assert "\n" not in str(e)
