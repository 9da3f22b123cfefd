"""One run assembled from many nodes: ``gpuscope ingest --job ID PATH...`` adds its rank files to
the run of job ``ID``, which fills in as nodes report.

The run id of a job is derived from the job id (not from file contents), so every node names the
same run. Each node's call is one transaction: its ranks, events, names, summaries and the rewritten
``runs`` row (rank count and extent over every rank stored so far). A rank the run holds already
is refused (one line, nothing stored). Name ids continue after the run's highest one.

Concurrent nodes on a team store: every call deletes and re-inserts the job's ``runs`` row, so two
calls that overlap conflict in DuckLake's commit and the later one is retried on the store as the
earlier one left it (fresh name ids, the rank check again). The first call of a job first commits
a placeholder ``runs`` row (0 ranks) on its own, so that even two first calls conflict; it is
removed again when that call fails and the job has no ranks.

The run's name is the first one given (:func:`job_run_name`): a later node's ``--name`` does not
rename it (the CLI says so in a note); a run still under its default name ``job ID`` takes the
first ``--name`` that comes. ``gpuscope runs --rename`` renames it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.records import RunRow
from gpuscope.store import Connection, Store, now_utc, transaction

JOB_RETRIES = 40  # attempts of a job's transaction that conflicts with another node's (team store)
_JOB_ID_OK = 200  # longest job id accepted, characters


def job_run_id(job: str) -> str:
    """The run id of job ``job``: 12 hex digits of SHA-256 over ``gpuscope-job`` and the id (the
    same on every node; a different space from content ids, which hash file digests)."""
    return hashlib.sha256(f"gpuscope-job\n{job}".encode()).hexdigest()[:12]


def check_job_id(job: str) -> str:
    """The job id stripped; raises IngestError when it is empty, too long or not printable."""
    j = job.strip()
    if not j or len(j) > _JOB_ID_OK or not j.isprintable():
        raise IngestError("--job", f"{job!r} is not a job id (1-{_JOB_ID_OK} printable characters)")
    return j


def _job_row(con: Connection, run_id: str) -> tuple[Any, ...] | None:
    return con.execute(
        "SELECT name, kind, created_at, tags, uploaded_by FROM runs WHERE run_id = ? "
        "ORDER BY n_ranks DESC LIMIT 1",
        [run_id],
    ).fetchone()


def ensure_job_run(con: Connection, job: str, name: str | None, uploaded_by: str | None) -> bool:
    """Commit a placeholder ``runs`` row (kind ``trace``, 0 ranks) for a job not stored yet, in a
    transaction of its own. Returns whether it made one. Raises IngestError when the id is taken
    by a run that is not a trace run."""
    run_id = job_run_id(job)

    def work() -> bool:
        with transaction(con):
            row = _job_row(con, run_id)
            if row is not None:
                if row[1] != "trace":
                    raise IngestError("--job", f"run {run_id} of job {job} is not a trace run")
                return False
            RunRow(
                run_id=run_id,
                name=name or default_job_name(job),
                kind="trace",
                n_ranks=0,
                n_events=0,
                source_bytes=0,
                tags=[f"job:{job}"],
                uploaded_by=uploaded_by,
            ).insert(con)
            return True

    return con.retrying(work, JOB_RETRIES) if isinstance(con, Store) else work()


def drop_empty_job_run(con: Connection, job: str) -> None:
    """Remove the placeholder of a job whose first call failed (only when it still has no ranks)."""
    run_id = job_run_id(job)

    def work() -> None:
        with transaction(con):
            n = con.execute("SELECT count(*) FROM ranks WHERE run_id = ?", [run_id]).fetchone()
            if n is not None and int(n[0]) == 0:
                con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])

    if isinstance(con, Store):
        con.retrying(work, JOB_RETRIES)
    else:
        work()


def existing_names(con: Connection, run_id: str) -> dict[str, int]:
    """The run's stored names -> ids (a job's later nodes reuse them)."""
    return {
        str(n): int(i)
        for i, n in con.execute(
            "SELECT name_id, name FROM names WHERE run_id = ?", [run_id]
        ).fetchall()
    }


def default_job_name(job: str) -> str:
    return f"job {job}"


def job_run_name(job: str, stored: str | None, given: str | None) -> str:
    """The name a job's run keeps: the ``stored`` one (the first node's, or a rename since), unless
    it is still the default ``job ID``; then ``given``, else the default. A later node's differing
    ``--name`` never renames the run (issue 47)."""
    if stored is not None and stored != default_job_name(job):
        return stored
    return given or stored or default_job_name(job)


def rewrite_job_row(con: Connection, job: str, name: str | None, tags: Iterable[str]) -> RunRow:
    """Inside the call's transaction: replace the job's ``runs`` row(s) by one row whose counts and
    extent cover every rank stored (this call's included). The delete makes concurrent calls of
    one job conflict (see the module docstring)."""
    run_id = job_run_id(job)
    old = _job_row(con, run_id)
    agg = con.execute(
        """SELECT count(*), coalesce(sum(n_events), 0), coalesce(sum(file_bytes), 0),
                  min(ts_min_ns + time_offset_ns), max(ts_max_ns + time_offset_ns)
           FROM ranks WHERE run_id = ?""",
        [run_id],
    ).fetchone()
    assert agg is not None  # an aggregate answers one row
    first = con.execute(
        "SELECT device_properties, metadata FROM ranks WHERE run_id = ? ORDER BY rank LIMIT 1",
        [run_id],
    ).fetchone()
    props = json.loads(first[0]) if first and first[0] else None
    meta = json.loads(first[1]) if first and first[1] else {}
    gpu = (
        props[0].get("name")
        if isinstance(props, list) and props and isinstance(props[0], dict)
        else None
    )
    torch = next(
        (
            meta[k]
            for k in ("torch_version", "pytorch_version", "gpuscope.torch_version")
            if isinstance(meta.get(k), str)
        ),
        None,
    )
    con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
    row = RunRow(
        run_id=run_id,
        name=job_run_name(job, str(old[0]) if old else None, name),
        kind="trace",
        n_ranks=int(agg[0]),
        n_events=int(agg[1]),
        source_bytes=int(agg[2]),
        gpu_name=gpu,
        torch_version=torch,
        tags=sorted({*(list(old[3] or []) if old else []), *tags, f"job:{job}"}),
        start_ns=agg[3],
        end_ns=agg[4],
        uploaded_by=old[4] if old else None,
        created_at=old[2] if old else now_utc(),
    )
    row.insert(con)
    return row


def world_size(con: Connection, run_id: str) -> int | None:
    """The job's world size as its ranks say (``distributedInfo.world_size``; the largest), or
    None when no rank says."""
    row = con.execute("SELECT max(world_size) FROM ranks WHERE run_id = ?", [run_id]).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def ranges_text(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    spans: list[list[int]] = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
