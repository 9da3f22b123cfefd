"""Damage real trace batches at random and feed them to the compiled parser: it must refuse them or
read them, never fault, and for each batch it reads say whether the text holds the memory mark
(``"[memory]"``, found in the strings it reads) as a search of the bytes does. Prints how many it
read (each of those the test suite also compares with DuckDB's reader on a smaller scale:
tests/test_compiled_parser.py).

    .venv/bin/python benchmarks/fuzz_compiled_parser.py [--rounds 20000] [--seed 7]
    PYTHONMALLOC=malloc valgrind -q .venv/bin/python benchmarks/fuzz_compiled_parser.py --rounds 1500
"""

from __future__ import annotations

import argparse
import glob
import random
from pathlib import Path

from gpuscope.ingest import _compiled_parser  # type: ignore[attr-defined]
from gpuscope.ingest.batch_insert import MEMORY_MARK
from gpuscope.ingest.json_stream import TraceSplitter
from gpuscope.ingest.source import iter_json_bytes

REPO = Path(__file__).resolve().parent.parent
MEMORY_SAMPLE = "sample_traces/memory/gpt_mem.pt.trace.json.gz"
ALPHABET = b'"{}[],:\\0123456789-.eE u\x00\xff\xc3'


def damaged(base: bytes, rng: random.Random) -> bytes:
    """``base`` with 1-8 random changes: a byte replaced, a run deleted, a byte inserted, cut."""
    data = bytearray(base)
    for _ in range(rng.randint(1, 8)):
        if not data:
            break
        j = rng.randrange(len(data))
        op = rng.randrange(4)
        if op == 0:
            data[j] = rng.randrange(256)
        elif op == 1:
            del data[j : j + rng.randint(1, 64)]
        elif op == 2:
            data[j:j] = bytes([rng.choice(ALPHABET)])
        else:
            del data[j:]
    return bytes(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    bases = []
    traces = sorted(glob.glob(str(REPO / "sample_traces/**/*.pt.trace.json*"), recursive=True))[:6]
    for f in [*traces, str(REPO / MEMORY_SAMPLE)]:  # the last: allocator events, the mark
        p = Path(f)
        bases.append(next(iter(TraceSplitter(p, iter_json_bytes(p), 16 << 10).batches())).data)
    rng = random.Random(a.seed)
    read = marked = 0
    for _ in range(a.rounds):
        data = damaged(rng.choice(bases), rng)
        got = _compiled_parser.scan(data)
        if got is None:
            continue
        read += 1
        marked += got[2]
        if got[2] != (MEMORY_MARK in data):
            raise SystemExit(f"the memory mark read {got[2]}, in the bytes not: {data[:200]!r}")
    print(
        f"{a.rounds} damaged batches: {read} read ({marked} holding the memory mark, each as the"
        f" bytes say), {a.rounds - read} refused, no fault"
    )


if __name__ == "__main__":
    main()
