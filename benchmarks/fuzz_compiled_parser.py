"""Damage real trace batches at random and feed them to the compiled parser: it must refuse them or
read them, never fault. Prints how many it read (each of those the test suite also compares with
DuckDB's reader on a smaller scale: tests/test_compiled_parser.py).

    .venv/bin/python benchmarks/fuzz_compiled_parser.py [--rounds 20000] [--seed 7]
    PYTHONMALLOC=malloc valgrind -q .venv/bin/python benchmarks/fuzz_compiled_parser.py --rounds 1500
"""

from __future__ import annotations

import argparse
import glob
import random
from pathlib import Path

from gpuscope.ingest import _compiled_parser  # type: ignore[attr-defined]
from gpuscope.ingest.json_stream import TraceSplitter
from gpuscope.ingest.source import iter_json_bytes

REPO = Path(__file__).resolve().parent.parent
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
    for f in sorted(glob.glob(str(REPO / "sample_traces/**/*.pt.trace.json*"), recursive=True))[:6]:
        p = Path(f)
        bases.append(next(iter(TraceSplitter(p, iter_json_bytes(p), 16 << 10).batches())).data)
    rng = random.Random(a.seed)
    read = sum(
        _compiled_parser.scan(damaged(rng.choice(bases), rng)) is not None for _ in range(a.rounds)
    )
    print(f"{a.rounds} damaged batches: {read} read, {a.rounds - read} refused, no fault")


if __name__ == "__main__":
    main()
