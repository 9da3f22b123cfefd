"""A/B of where ``gpuscope ingest`` hashes a trace (issue 45): the ingest code of commit OLD
(the writer hashes the file before its first batch) against the working tree's, on one trace.

    .venv/bin/python benchmarks/ingest_sha_ab.py TRACE --old COMMIT [--repeat 3]

Arms, alternated (old new, new old, ...), each run a fresh process running ``gpuscope ingest TRACE``
into a new store in a temporary folder. The ``old`` arm imports the package from a copy of the
editable install's tree of links (``build/__editable__*/gpuscope``) in which the files of
``--files`` (default: the ingest modules the change touched) are COMMIT's; everything else is the
working tree's in both arms, so only those files differ.

``--write-only``: ``ingest_paths`` alone, without the summary ``gpuscope ingest`` computes after
the commit (4-5 CPU s of a 1 GB rank's: less noise on the part that changed).

Per run: wall s, CPU s (user + sys of the process and its threads), peak RSS (MiB and x the
file), the 1-minute load average before it, when the writer took its first parsed batch (s after
the start: the old arm hashes the file first), the new arm's wait for the run id (s), and digests of what was stored: ``events`` (count and
a sum of each column's row hashes), and the ``runs`` and ``ranks`` rows' ids and hashes (run_id,
ranks.sha256). The arms must store the same; the script exits 1 when they do not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from measure import own_usage

ROOT = Path(__file__).resolve().parent.parent
FILES = "ingest/source.py,ingest/parse_pool.py,ingest/loader.py,ingest/batch_insert.py"


def one(trace: Path, store: Path, write_only: bool) -> dict[str, Any]:
    """``gpuscope ingest TRACE`` into ``store`` in this process (``write_only``: ``ingest_paths``
    without the summary computed after it): its figures and digests."""
    import gpuscope
    from gpuscope.ingest import loader
    from gpuscope.ingest.batch_insert import BatchInserter

    seen: dict[str, float] = {}
    insert = BatchInserter.insert_parsed

    def first_insert(self: Any, *a: Any, **k: Any) -> Any:
        seen.setdefault("first_batch_s", time.perf_counter() - t0)
        return insert(self, *a, **k)

    BatchInserter.insert_parsed = first_insert  # type: ignore[method-assign]
    pending = getattr(loader, "PendingRunId", None)  # the new arm's
    if pending is not None:
        result = pending.result

        def timed_result(self: Any) -> str:
            w0 = time.perf_counter()
            try:
                return result(self)
            finally:
                seen["id_wait_s"] = seen.get("id_wait_s", 0.0) + time.perf_counter() - w0

        pending.result = timed_result
    t0 = time.perf_counter()
    if write_only:
        from gpuscope.store import connect

        with connect(str(store)) as con:
            loader.ingest_paths(con, [trace])
    else:
        from gpuscope.cli.main import main

        code = main(["ingest", str(trace), "--db", str(store)])
        if code:
            raise SystemExit(f"{trace}: gpuscope ingest exited {code}")
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "package": str(Path(gpuscope.__file__).parent.parent),
        "first_batch_s": round(seen.get("first_batch_s", float("nan")), 2),
        "id_wait_s": round(seen.get("id_wait_s", float("nan")), 2),
        **own_usage(wall, trace.stat().st_size),
    }
    out.update(digests(store))
    return out


def digests(store: Path) -> dict[str, str]:
    """sha256 (16 hex) of ``events`` (order-free) and of the run's ids and file hashes."""
    from gpuscope.store import connect

    con = connect(str(store))
    try:
        con.execute("SET enable_progress_bar = false")
        events = con.execute("SELECT count(*), sum(hash(COLUMNS(*))) FROM events").fetchone()
        ids = con.execute(
            "SELECT r.run_id, k.rank, k.sha256, r.n_events FROM runs r JOIN ranks k USING (run_id)"
            " ORDER BY k.rank"
        ).fetchall()
    finally:
        con.close()
    return {
        "events_digest": hashlib.sha256(repr(events).encode()).hexdigest()[:16],
        "ids": repr(ids),
    }


def old_tree(commit: str, files: list[str], into: Path) -> Path:
    """A copy of the editable install's link tree with ``files`` as of ``commit``; the folder
    to put first on PYTHONPATH."""
    [links] = (ROOT / "build").glob("__editable__*/gpuscope")
    shutil.copytree(links, into / "gpuscope", symlinks=True)
    for f in files:
        target = into / "gpuscope" / f
        target.unlink()
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{commit}:{f}"],
            capture_output=True,
            check=True,
        ).stdout
        target.write_bytes(text)
    return into


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--old", required=False, help="the commit whose --files the old arm runs")
    ap.add_argument("--files", default=FILES)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write-only", action="store_true", help="no summary after the ingest")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # store
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.trace, Path(args.one), args.write_only)))
        return 0
    if not args.old:
        ap.error("--old COMMIT is needed")
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpuscope-shaab-") as tmp:
        old = old_tree(args.old, args.files.split(","), Path(tmp) / "old")
        for i in range(args.repeat):
            for arm in ("old", "new") if i % 2 == 0 else ("new", "old"):
                env = dict(os.environ)
                if arm == "old":
                    env["PYTHONPATH"] = str(old) + os.pathsep + env.get("PYTHONPATH", "")
                load = os.getloadavg()[0]
                store = Path(tmp) / f"s{i}{arm}"
                extra = ["--write-only"] if args.write_only else []
                done = subprocess.run(
                    [sys.executable, __file__, str(args.trace), "--one", str(store), *extra],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                shutil.rmtree(store, ignore_errors=True)
                if done.returncode:
                    tail = "\n".join(done.stderr.strip().splitlines()[-5:])
                    raise SystemExit(f"{arm}: exited {done.returncode}:\n{tail}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                if (arm == "old") != r["package"].startswith(str(old)):
                    raise SystemExit(f"{arm}: imported the package from {r['package']}")
                r.update(arm=arm, repeat=i + 1, load_1min=round(load, 1))
                rows.append(r)
                print(json.dumps({k: v for k, v in r.items() if k != "package"}), flush=True)
    same = {k: len({r[k] for r in rows}) == 1 for k in ("events_digest", "ids")}
    print("stored alike in every run:", same)
    for arm in ("old", "new"):
        mine = [r for r in rows if r["arm"] == arm]
        print(
            f"{arm}: wall {[r['wall_s'] for r in mine]} s, CPU {[r['cpu_s'] for r in mine]} s, "
            f"peak {[r['peak_mib'] for r in mine]} MiB, first batch written at "
            f"{[r['first_batch_s'] for r in mine]} s"
        )
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
