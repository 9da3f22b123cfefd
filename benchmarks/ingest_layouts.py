"""The write phase of one synthetic trace's ingest in two layouts of the same events: indented
(``json.dumps(indent=1)``: Kineto's separator between events) and on one line (``indent=None``),
interleaved, each run a fresh process (``benchmarks/ingest_write_cpu.py``). CPU s per run and the
medians; both layouts should cost the same (the splitter cuts either at a separator between
events, tests/test_ingest_one_line.py).

    .venv/bin/python benchmarks/ingest_layouts.py [--launches 60000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAYOUTS = {"indented": 1, "one line": None}


def write(folder: Path, launches: int) -> None:
    """The trace in each layout, in ``folder`` (0.json, 1.json, ...: the order of LAYOUTS)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from tracegen import TraceBuilder

    t = TraceBuilder()
    for i in range(launches):
        t.launch(f"kernel_{i % 97}", i * 10.0, i * 10.0 + 1, 1.0)
    for i, indent in enumerate(LAYOUTS.values()):
        t.write(folder / f"{i}.json", indent=indent)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=60_000, help="kernel launches (4 events each)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--write", type=Path, help=argparse.SUPPRESS)  # the child that writes them
    a = ap.parse_args()
    if a.write:
        write(a.write, a.launches)
        return 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cpu: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    with tempfile.TemporaryDirectory(prefix="gpuscope-layouts-") as d:
        # written by a child: a runner's peak RSS stays its own (ru_maxrss outlives exec)
        cmd = [sys.executable, __file__, "--write", d, "--launches", str(a.launches)]
        subprocess.run(cmd, check=True)
        paths = {name: Path(d) / f"{i}.json" for i, name in enumerate(LAYOUTS)}
        for name, p in paths.items():
            print(f"{name}: {p.stat().st_size / 1e6:.1f} MB")
        for r in range(a.repeat):
            for name in list(LAYOUTS)[:: 1 if r % 2 == 0 else -1]:
                out = subprocess.run(
                    [sys.executable, str(HERE / "ingest_write_cpu.py"), str(paths[name])],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=env,
                ).stdout
                row = json.loads(out)
                cpu[name].append(row["cpu_s"])
                load = os.getloadavg()[0]
                print(
                    f"round {r + 1} {name}: {row['cpu_s']} CPU s, {row['peak_rss_mb']} MB, load {load:.1f}"
                )
    for name, v in cpu.items():
        print(f"{name}: median {statistics.median(v):.2f} CPU s of {len(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
