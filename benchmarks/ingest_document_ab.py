"""A/B of what ``gpuscope ingest`` pays after its commit for a big one-rank trace: the rank's
summary parts computed on the store, then the run's ``analyze --json`` document (report_part).

    .venv/bin/python benchmarks/ingest_document_ab.py TRACE [--repeat 3]

Arms, alternated (A B A B ...), each run a fresh process running ``gpuscope ingest TRACE`` into a
new store in a temporary folder:

- ``closed``: the parts' rank indexes are closed before the document is computed (it builds the
  rank's GPU, host, runtime and gap tables again), as before ``keep_indexes`` (b677490);
- ``flops_twice``: the document counts the rank's FLOPs per step again (the headline part
  counted them), as before the rank index kept them;
- ``old``: both (the code before b677490);
- ``new``: the document reuses the parts' working tables and FLOPs;
- ``parts_limit=200MB``: ``new`` with the parts' first DuckDB memory limit at 200MB
  (``rank_summary.PARTS_MEMORY_LIMITS``).

    .venv/bin/python benchmarks/ingest_document_ab.py TRACE --arms flops_twice,new

Or revisions against each other (``--revs OLD NEW``): each runs arm ``new`` from a worktree of its
own (``bench_analyze_cli.tree_for``: frozen while measured, its parser compiled; ``WORKTREE``:
the working tree as installed), in turn (A B A B ...)::

    .venv/bin/python benchmarks/ingest_document_ab.py TRACE --revs cd91905 HEAD --repeat 3

``REV@ARM`` runs that arm of the revision (``HEAD@parts_limit=200MB``).

Per run: wall s, CPU s (user + sys of the process), peak RSS (MiB and × the file), the after-commit
step's own CPU s (parts + document, ``time.process_time`` around it), and digests of what was
stored after the commit (the ``rank_summaries`` rows but their times: every part and the
document's text, exactly: floats to the last bit) and of ``events`` (a sum of each column's row
hashes): the arms must store the same. Prints the 1-minute
load average before each run (5+ engineers share this VM's 2 cores: compare CPU, not wall).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from measure import own_usage


def one(trace: Path, store: Path, arm: str, keep: Path | None = None) -> dict[str, Any]:
    """Ingest ``trace`` into ``store`` in this process, as arm ``arm``; its figures and digests."""
    from gpuscope.analysis import rank_summary as RS
    from gpuscope.cli.main import main

    seen: dict[str, float] = {}
    if arm in ("old", "closed"):  # the indexes closed between the parts and the document
        plain = RS.store_outside_transaction

        def closing(*a: Any, **k: Any) -> int:
            k.pop("keep_indexes", None)
            return plain(*a, **k)

        RS.store_outside_transaction = closing  # type: ignore[assignment]
    if arm in ("old", "flops_twice"):  # FLOPs counted anew by each analysis of the rank
        from gpuscope.analysis.rank_index import RankIndex

        memo = RankIndex.memo

        def unkept(self: Any, key: Any, compute: Any, **k: Any) -> Any:
            return compute() if key[0] == "flops" else memo(self, key, compute, **k)

        RankIndex.memo = unkept  # type: ignore[method-assign]
    if arm.startswith("parts_limit="):  # the parts' first DuckDB memory limit (e.g. 200MB)
        RS.PARTS_MEMORY_LIMITS = (arm.split("=", 1)[1], *RS.PARTS_MEMORY_LIMITS[1:])
    hook = RS.StoreAfterIngest.__call__

    def timed_hook(self: Any, con: Any, result: Any) -> Any:
        after = hook(self, con, result)
        if after is None:
            return None

        def timed(c: Any) -> Any:
            c0 = time.process_time()
            try:
                return after(c)
            finally:
                seen["after_commit_cpu_s"] = time.process_time() - c0

        return timed

    RS.StoreAfterIngest.__call__ = timed_hook  # type: ignore[method-assign]
    t0 = time.perf_counter()
    code = main(["ingest", str(trace), "--db", str(store)])
    if code:
        raise SystemExit(f"{trace}: gpuscope ingest exited {code}")
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "arm": arm,
        "after_commit_cpu_s": round(seen.get("after_commit_cpu_s", float("nan")), 2),
        **own_usage(wall, trace.stat().st_size),
    }
    out.update(digests(store, keep))
    return out


def digests(store: Path, keep: Path | None = None) -> dict[str, str]:
    """sha256 (16 hex) of the stored parts and document (rows without their times), and of
    ``events`` in a total order; ``keep``: the digested parts also written there (JSON, one
    line a part), to tell which part differs."""
    from gpuscope.store import connect

    con = connect(str(store))
    try:
        con.execute("SET enable_progress_bar = false")
        parts = con.execute(
            "SELECT rank, part, version, doc FROM rank_summaries ORDER BY rank, part"
        ).fetchall()
        events = con.execute("SELECT count(*), sum(hash(COLUMNS(*))) FROM events").fetchone()
    finally:
        con.close()
    # the document's row: its text (its stamp holds the run's created_at, its version the code's
    # fingerprint, which another engineer's edit to the analysis changes mid-benchmark)
    parts = [
        (r, p, json.loads(json.loads(doc)["text"])) if p == "report" else (r, p, v, json.loads(doc))
        for r, p, v, doc in parts
    ]
    digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:16]
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(p, sort_keys=True, default=repr) for p in parts]
        (keep / f"{digest}.jsonl").write_text("\n".join(lines) + "\n")
    return {
        "parts_digest": digest,
        "events_digest": hashlib.sha256(repr(events).encode()).hexdigest()[:16],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--arms", default="old,new", help="old, closed, flops_twice, new")
    ap.add_argument("--revs", nargs="+", default=None, help="REV or REV@ARM (default arm: new)")
    ap.add_argument("--trees", type=Path, default=Path("benchmarks/out/ingest_document_ab/trees"))
    ap.add_argument("--keep", type=Path, default=None, help="write each digest's parts here")
    ap.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)  # store, arm
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.trace, Path(args.one[0]), args.one[1], args.keep)))
        return 0
    rows = []
    arms: list[tuple[str, str, dict[str, str] | None]] = []  # (label, arm, environment)
    if args.revs:
        from bench_analyze_cli import tree_for

        for spec in args.revs:
            rev, _, arm = spec.partition("@")  # REV@ARM: that arm of the revision
            label, pkg = tree_for(rev, args.trees.resolve())
            env = dict(os.environ)
            if str(pkg) not in ("", "."):
                env["PYTHONPATH"] = str(pkg)
            arms.append((f"{label}@{arm}" if arm else label, arm or "new", env))
    else:
        arms = [(arm, arm, None) for arm in args.arms.split(",")]
    for _ in range(args.repeat):
        for label, arm, env in arms:
            load = os.getloadavg()[0]
            with tempfile.TemporaryDirectory(prefix="gpuscope-docab-") as d:
                done = subprocess.run(
                    [sys.executable, __file__, str(args.trace), "--one", str(Path(d) / "s"), arm]
                    + (["--keep", str(args.keep.resolve())] if args.keep else []),
                    capture_output=True,
                    text=True,
                    env=env,
                )
            if done.returncode:
                tail = "\n".join(done.stderr.strip().splitlines()[-5:])
                raise SystemExit(f"{label}: exited {done.returncode}:\n{tail}")
            r = json.loads(done.stdout.strip().splitlines()[-1])
            r["arm"] = label
            r["load_1min"] = round(load, 1)
            rows.append(r)
            print(json.dumps(r), flush=True)
    same = {k: len({r[k] for r in rows}) == 1 for k in ("parts_digest", "events_digest")}
    print("stored alike in every run:", same)
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
