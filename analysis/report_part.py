"""A run's ``analyze --json`` documents, computed once when the run is ingested and stored with it
(part ``report`` of ``rank_summaries``, one row per rank viewed), so that ``gpuscope analyze
--json RUN`` and ``analyze RUN --rank N`` of a rank the job's verdict analysed read one row
instead of the run's events.

A stored document is what :func:`analyze` + :func:`analyze_json` give for a view with every
option at its default but the rank, as JSON text (:func:`text_of`: NaN and non-JSON values kept as
``analyze`` prints them): the run's default view (its lowest rank), under that rank's row, and
the view of each other rank whose report the job's verdict made while the default was computed
(the pace-setter, the rank its fixes are for: the one the verdict says to look at), under its
own. The job's verdict is the same from every view, so those cost no analysis of their own. A
stored row is used only while both hold:

- its ``version`` is :func:`version`: a fingerprint of the analysis code (every module of
  ``gpuscope.analysis`` and ``gpuscope.vocabulary``), so any change to how a figure is computed
  makes the stored documents stale, without a version number to remember to bump;
- its ``stamp`` is the run's :func:`stamp` now: the run's row, its ranks' rows (their memory
  events come with them) and its NVML series counted (a job's later ranks, a renamed or re-tagged
  run, a series attached afterwards).

A stale or missing document is computed from the events when asked for (``analyze``, as before
this part existed; nothing is written) and stored again by :func:`store` (the ingest's
after-commit step, ``gpuscope maintain --analyses``). This module imports nothing heavy:
``analyze --json`` of a stored run imports none of the analyses (pandas it does import: DuckDB
loads it on the first statement with parameters).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from gpuscope.analysis.report import RunReport
    from gpuscope.analysis.verdict import JobDiagnosis
    from gpuscope.store import Connection

T = TypeVar("T")

NAME = "report"
_RUN_ID = re.compile(r"[0-9a-f]{1,64}")  # what the ingest names a run (hex of a SHA-256)
TABLE = "rank_summaries"  # stored_parts.TABLE (not imported: that module imports pandas)
#: The packages whose code the stored document depends on (their sources make :func:`version`).
_FINGERPRINTED = ("analysis", "vocabulary")


@functools.cache
def version() -> int:
    """The analysis code's fingerprint, a positive 31-bit integer (``rank_summaries.version`` is
    an INTEGER): the SHA-256 of every ``.py`` file of :data:`_FINGERPRINTED`, by path relative to
    the package, in path order. Any edit to a module changes it (each stored document is then
    stale). Cost: reading ~0.9 MB of sources, a few ms once per process."""
    root = Path(__file__).parent.parent  # the gpuscope package (links not followed: an
    # editable install's tree of links holds the package's own modules)
    h = hashlib.sha256()
    for sub in _FINGERPRINTED:
        for path in sorted((root / sub).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return int.from_bytes(h.digest()[:4], "big") & 0x7FFFFFFF or 1


#: The stamp's inputs (:func:`stamp`), one statement: its tables read once each.
_STAMP_SQL = """
    (SELECT CAST(list(runs) AS VARCHAR) FROM runs WHERE run_id = $run),
    (SELECT CAST(list((rank, n_events, time_offset_ns) ORDER BY rank) AS VARCHAR)
       FROM ranks WHERE run_id = $run),
    (SELECT count(*) FROM nvml_series WHERE run_id = $run)"""


def _stamp_of(row: tuple[Any, ...]) -> str:
    return hashlib.sha256(repr(tuple(row)).encode()).hexdigest()


def stamp(con: Connection, run_id: str) -> str:
    """What the document reads of the run besides its events, which may change after its ingest:
    the ``runs`` row (name, tags, GPU), the ``ranks`` rows (a job's later ranks, with their
    memory events) and the number of NVML series (``ingest --attach`` adds them later). Equal
    stamps: the same input."""
    row = con.execute(f"SELECT {_STAMP_SQL}", {"run": run_id}).fetchone()
    return _stamp_of(row or ())


def analyze(
    con: Connection, run_id: str, *, seen: dict[int, RunReport] | None = None, **kwargs: Any
) -> tuple[RunReport, JobDiagnosis]:
    """The viewed rank's report and the job's verdict, what ``gpuscope analyze`` shows:
    ``analyze_run(con, run_id, **kwargs)`` and ``job.diagnose`` built from it (the pace-setter's
    report made once more only when it is another rank). ``seen``, when given, receives every
    rank's report made, by rank. Raises ValueError as they do."""
    from gpuscope.analysis.job import diagnose
    from gpuscope.analysis.report import analyze_run

    report = analyze_run(con, run_id, **kwargs)
    reports = seen if seen is not None else {}
    reports[int(report.rank)] = report

    def report_of(rank: int) -> RunReport:  # each rank's report made once (job.memo)
        if rank not in reports:
            reports[rank] = analyze_run(con, run_id, **{**kwargs, "rank": rank})
        return reports[rank]

    return report, diagnose(con, run_id, report_of)


def analyze_json(report: RunReport, job: JobDiagnosis) -> dict[str, Any]:
    """``analyze --json``'s document: the report's JSON with the job's under ``job``."""
    doc = report.to_json()
    doc["job"] = job.to_json()
    return doc


def text_of(doc: dict[str, Any]) -> str:
    """``doc`` as compact JSON text, as ``analyze --json`` writes values (``default=str``, NaN
    kept): ``json.loads`` of it printed again gives ``analyze``'s text exactly."""
    return json.dumps(doc, default=str)


def lowest_rank(con: Connection, run_id: str) -> int | None:
    """The run's lowest rank, the one its stored document views (None without ranks)."""
    sql = "SELECT min(rank) FROM ranks WHERE run_id = $run"
    if _RUN_ID.fullmatch(run_id):  # a stored run id: written into the statement, no parameter
        row = con.execute(sql.replace("$run", f"'{run_id}'")).fetchone()
    else:
        row = con.execute(sql, {"run": run_id}).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def stored_text(con: Connection, run_id: str, rank: int | None = None) -> str | None:
    """The stored document of ``run_id``'s view of ``rank`` (None: the default view, its lowest
    rank) (:func:`text_of`), or None when there is none of the current :func:`version` or the run
    changed since (:func:`stamp`). One statement."""
    of_rank = (
        "rank = (SELECT min(rank) FROM ranks WHERE run_id = $run)"
        if rank is None
        else f"rank = {int(rank)}"
    )
    sql = f"""SELECT (SELECT doc FROM {TABLE} WHERE run_id = $run AND part = $part
                       AND version = $version AND {of_rank}), {_STAMP_SQL}"""
    if _RUN_ID.fullmatch(run_id):  # a stored run id: written into the statement, no parameter
        # bound (binding one makes duckdb import pandas, ~0.4 s of a fresh `analyze --json`)
        sql = sql.replace("$run", f"'{run_id}'").replace("$part", f"'{NAME}'")
        row = con.execute(sql.replace("$version", str(int(version())))).fetchone()
    else:
        row = con.execute(sql, {"run": run_id, "part": NAME, "version": version()}).fetchone()
    if row is None or row[0] is None:
        return None
    held = json.loads(row[0])
    if held.get("stamp") != _stamp_of(row[1:]):
        return None
    text = held.get("text")
    return text if isinstance(text, str) else None


#: DuckDB's memory while :func:`store` computes a document, tried in order (its working tables
#: spill to disk beyond it; a limit DuckDB runs out of is tried again at the next; one below the
#: run's largest rank's events x 6 B is not tried). The 1 GB benchmark rank's ingest, peak RSS
#: with its document: 806 MB under the store's own limit (80 % of RAM), 645 MB at 200 MB, 485-496
#: MB (463-473 MiB) at 100 MB, the same CPU; at 50 MB DuckDB runs out and the retry at 200 costs
#: 3 CPU s (docs/benchmarks.md).
MEMORY_LIMITS = ("100MB", "200MB", "1GB")


def _computed(con: Connection, run_id: str, *, copy: bool = True) -> dict[int, str]:
    """:func:`text_of` the document of the default view and of every other rank's view whose
    report it made (:func:`_texts`), by rank, computed under :data:`MEMORY_LIMITS`: with ``copy``,
    on an in-memory copy of the ranks it reads where they fit (:func:`_on_copy`), else on ``con``
    (the store's own limit set back after)."""
    texts = _on_copy(con, run_id) if copy else None
    if texts is not None:
        return texts
    return _texts(*_seen_and(con, run_id, unchanged=False))


def _texts(seen: dict[int, RunReport], made: tuple[RunReport, JobDiagnosis]) -> dict[int, str]:
    """The documents of the views whose reports :func:`analyze` made (``seen``, by rank) with the
    job's verdict ``made[1]``: the default view's (``made[0]``) and each other rank's, whose
    document (``analyze RUN --rank N``) is that rank's report with the same verdict."""
    report, job = made
    out = {int(report.rank): text_of(analyze_json(report, job))}
    for rank, rep in seen.items():
        out.setdefault(int(rank), text_of(analyze_json(rep, job)))
    return out


def _under_limits(con: Any, run_id: str, compute: Callable[[], T]) -> T:
    """``compute()`` (an analysis of ``run_id``) under DuckDB memory limits
    :data:`MEMORY_LIMITS` in turn (:func:`~gpuscope.analysis.rank_index.within_working_memory`:
    out of memory at one, the rank's working tables are closed and made again at the next; at
    the last it propagates; a limit too small for the run's largest rank is not tried),
    ``con``'s own limit set back after."""
    from gpuscope.analysis.rank_index import within_working_memory

    return within_working_memory(con, compute, MEMORY_LIMITS, run_ids=[run_id])


#: The most events, together, of the ranks a document reads for it to be computed on an
#: in-memory copy of them (:func:`_on_copy`), as the ranks' summary parts are
#: (``rank_summary.MAX_IN_MEMORY_EVENTS``).
COPY_MAX_EVENTS = 1_000_000
#: The tables whose rows the copy holds of the copied ranks only; of the others, the run's rows.
_PER_RANK = ("events", "threads", "memory_events")


def _on_copy(con: Connection, run_id: str) -> dict[int, str] | None:
    """:func:`_texts` of the default view computed on an in-memory DuckDB copy of the
    run's rows (:func:`_copy`), with the events of only the ranks it reads: the viewed (lowest)
    rank, each rank whose report the job's verdict asks for, and each report's straggler and the
    rank that waits most for it (read by the pace-setter's cause). None, to be computed on the
    store, where those ranks hold more than :data:`COPY_MAX_EVENTS` events (or an unknown
    number), or where a rank of several has no cross-rank part stored at its current version
    (the analyses would compute it from that rank's events).

    Every analysis statement filters on the run and the rank, so the copy answers each as the
    store does, without a lake's catalog and Parquet files per statement (128 DDP ranks: the
    document 5.1-5.5 -> 3.4-3.7 CPU s, the copy included; docs/benchmarks.md). The ranks are
    guessed first from the stored cross-rank parts (the straggler of their matched collectives
    and its waiting rank); a report or verdict that names a rank not copied makes the copy again
    with it, so the document is always the one computed from the store."""
    from gpuscope.analysis import rank_frames
    from gpuscope.analysis.stored_parts import read

    sizes = {
        int(r): n
        for r, n in con.execute(
            "SELECT rank, n_events FROM ranks WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    if not sizes:
        return None
    parts = read(con, run_id, rank_frames.NAME, rank_frames.VERSION) if len(sizes) > 1 else {}
    if len(sizes) > 1 and set(parts) != set(sizes):
        return None  # a rank without its cross-rank part: the analyses read its events for it
    want = {min(sizes)} | _straggler_guess(con, run_id, parts)
    while True:
        if any(sizes.get(r) is None for r in want):
            return None
        if sum(int(sizes[r]) for r in want) > COPY_MAX_EVENTS:
            return None
        with _copy(con, run_id, sorted(want)) as on:
            seen, (report, job) = _seen_and(on, run_id)
            named = _ranks_named(list(seen.values()), job)
            if named <= want:
                return _texts(seen, (report, job))
        want |= named


def _seen_and(
    on: Any, run_id: str, *, unchanged: bool = True
) -> tuple[dict[int, RunReport], tuple[RunReport, JobDiagnosis]]:
    """:func:`analyze` on ``on`` under :func:`_under_limits`, with every rank's report it made.
    ``unchanged``: ``on`` is :func:`_copy`'s database, which nothing else writes to: the rank
    indexes on it check the run's row when they are made, not again before each table
    (``rank_index.unchanging``)."""
    from gpuscope.analysis.rank_index import unchanging

    seen: dict[int, RunReport] = {}

    def compute() -> tuple[RunReport, JobDiagnosis]:
        seen.clear()  # a try at the next limit starts again
        return analyze(on, run_id, seen=seen)

    if not unchanged:
        return seen, _under_limits(on, run_id, compute)
    with unchanging(on):
        return seen, _under_limits(on, run_id, compute)


def _ranks_named(reports: list[RunReport], job: JobDiagnosis) -> set[int]:
    """The ranks whose events the document's analyses read: each report's rank, its straggler and
    the straggler's waiting rank, and the ranks the verdict names."""
    out: set[int] = set()
    for rep in reports:
        out.add(int(rep.rank))
        s = rep.straggler
        if s is not None:
            out |= {int(s.rank), int(s.waiting_rank)}
    for r in (job.pace_setter, job.waiting_rank, job.cause_rank, job.fix_rank):
        if r is not None:
            out.add(int(r))
    return out


def _straggler_guess(con: Connection, run_id: str, parts: dict[int, Any]) -> set[int]:
    """The straggler of the collectives matched from the ranks' cross-rank ``parts`` (by rank) and
    the rank that waits most for it (what the verdict most likely analyses beside the viewed
    rank); empty for fewer than two ranks or without a match. Only a guess: see
    :func:`_on_copy`."""
    if len(parts) < 2 or not any(p.get("device") is not None for p in parts.values()):
        return set()
    from gpuscope.analysis import rank_frames
    from gpuscope.analysis.report import _match_from_parts

    first = parts[min(parts)]
    match = _match_from_parts(
        con,
        run_id,
        parts,
        rank_frames.window_of(first).n_steps,
        rank_frames.stats_of(first).mean_ms * 1e6,
    )
    s = match.straggler
    return set() if s is None else {int(s.rank), int(s.waiting_rank)}


@contextmanager
def _copy(con: Connection, run_id: str, ranks: list[int]) -> Iterator[Any]:
    """A new in-memory DuckDB database (one thread, the store's temp directory) with the store's
    tables holding the run's rows, of :data:`_PER_RANK` only those of ``ranks``; closed after."""
    import duckdb
    from gpuscope.analysis.rank_index import close_shared
    from gpuscope.store.schema import TABLES

    row = con.execute("SELECT current_setting('temp_directory')").fetchone()
    on = duckdb.connect(":memory:", config={"threads": 1})
    try:
        if row is not None and row[0]:
            on.execute("SET temp_directory = ?", [str(row[0])])
        for table in TABLES:
            on.execute(table.ddl(keys=False))
            # the ranks as a list of constants: it prunes the lake's files (a list parameter
            # does not; the copy of 128 DDP ranks' two: 88 -> 48 ms)
            of_ranks = f" AND rank IN ({', '.join(str(int(r)) for r in ranks)})"
            rows = con.execute(
                f"SELECT * FROM {table.name} WHERE run_id = ?"
                + (of_ranks if table.name in _PER_RANK else ""),
                [run_id],
            ).to_arrow_table()
            on.register("_gpuscope_copied", rows)
            try:
                on.execute(f"INSERT INTO {table.name} SELECT * FROM _gpuscope_copied")
            finally:
                on.unregister("_gpuscope_copied")
        yield on
    finally:
        close_shared(on)
        on.close()


def store(con: Connection, run_id: str, *, copy: bool = True) -> bool:
    """Compute the documents of ``run_id``'s default view and of the other ranks' views its
    verdict analysed (:func:`_computed`) from its events and store them, one row per rank
    (replacing the run's others), in a transaction of its own; ``con`` must not be inside one. ``copy``: computed
    on an in-memory copy of the ranks it reads where they fit (:func:`_on_copy`); False: on
    ``con`` (a rank too big to copy, whose working tables the ingest's parts left on it). Returns
    False without a write: not a trace run, one ``analyze`` refuses (ValueError: it says why when
    asked), or a run deleted or changed while it was computed."""
    from gpuscope.store import Store, now_utc, transaction

    before = stamp(con, run_id)
    ranks = con.execute("SELECT min(rank) FROM ranks WHERE run_id = ?", [run_id]).fetchone()
    kind = con.execute("SELECT kind FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if ranks is None or ranks[0] is None or kind is None or kind[0] != "trace":
        return False
    try:
        texts = _computed(con, run_id, copy=copy)
    except ValueError:
        return False
    at = now_utc()
    rows = [
        [run_id, rank, NAME, version(), json.dumps({"stamp": before, "text": text}), at]
        for rank, text in sorted(texts.items())
    ]

    def work() -> bool:
        with transaction(con):
            if stamp(con, run_id) != before:
                return False  # changed (or deleted) meanwhile: this document is of another input
            con.execute(f"DELETE FROM {TABLE} WHERE run_id = ? AND part = ?", [run_id, NAME])
            con.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", rows)
            return True

    return con.retrying(work) if isinstance(con, Store) else work()


def refresh(con: Connection) -> int:
    """Store the document of every trace run whose stored one is missing or stale (another
    :func:`version`, a changed run): a full analysis per such run (``gpuscope maintain
    --analyses``). Returns how many were stored."""
    runs = con.execute("SELECT run_id FROM runs WHERE kind = 'trace' ORDER BY run_id").fetchall()
    return sum(int(store(con, rid)) for (rid,) in runs if stored_text(con, rid) is None)


def print_text(text: str) -> str:
    """``analyze --json``'s output of a stored document (:func:`stored_text`), as
    ``print_json`` writes a document: two-space indent, ``default=str``."""
    return json.dumps(json.loads(text), indent=2, default=str)
