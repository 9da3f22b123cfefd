"""Run CRUD: list, resolve (id, prefix or name), rename, tag and delete runs."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gpuscope.store import schema
from gpuscope.store.connection import Connection, Store
from gpuscope.store.transactions import transaction
from gpuscope.vocabulary.errors import Ambiguous

RUN_TABLES = (
    "rank_summaries",
    "threads",
    "names",
    "events",
    "memory_events",
    "ranks",
    "nvml_samples",
    "nvml_series",
    "runs",
)
RUN_SELECT = ", ".join(schema.RUN_COLUMNS)  # a SELECT list


# ---------------------------------------------------------------------------------------------------
# Runs


class AmbiguousRunName(Ambiguous):
    """A run reference (a name or an id prefix) that matches several runs; lists them."""

    def __init__(self, ref: str, matches: list[tuple[str, str]]) -> None:
        self.matches = matches
        listed = ", ".join(f"{rid} ({name})" for rid, name in matches[:10])
        more = f" and {len(matches) - 10} more" if len(matches) > 10 else ""
        super().__init__(
            ref, f"ambiguous: matches {len(matches)} runs: {listed}{more}; give a run id"
        )


def delete_run(con: Connection, run_id: str) -> bool:
    """Remove a run from every table, in one transaction; False when there was no such run."""

    def work() -> bool:
        with transaction(con):
            if not run_exists(con, run_id):
                return False
            for t in RUN_TABLES:
                con.execute(f"DELETE FROM {t} WHERE run_id = ?", [run_id])
        return True

    return con.retrying(work) if isinstance(con, Store) else work()


def run_exists(con: Connection, run_id: str) -> bool:
    return con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is not None


def resolve_run(con: Connection, ref: str) -> str | None:
    """A run id, a unique prefix of one, or a run name -> the run id; ``None`` when nothing
    matches. A name (or prefix) that matches several runs raises ``AmbiguousRunName``, which lists
    them (id and name), rather than reading as "no such run"."""
    # every run's id and name, matched here: a bound parameter makes duckdb import pandas (~0.4 s
    # of a `gpuscope analyze` that reads a stored document); one row per run, a few ms at 10,000
    rows = con.execute("SELECT run_id, name FROM runs ORDER BY created_at DESC, run_id").fetchall()
    return match_run(
        ref, [r for r in rows if r[0] == ref or r[1] == ref or str(r[0]).startswith(ref)]
    )


def match_run(ref: str, rows: list[tuple[Any, Any]]) -> str | None:
    """The run ``ref`` names among ``rows``, the (run id, name) rows it matches, newest first: the
    run whose id it is, else the one run it matches; None for none; ``AmbiguousRunName`` for
    several."""
    exact = [r[0] for r in rows if r[0] == ref]
    if exact:
        return exact[0]
    matches = list(dict.fromkeys((str(r[0]), str(r[1])) for r in rows))
    if len(matches) > 1:
        raise AmbiguousRunName(ref, matches)
    return matches[0][0] if matches else None


def list_runs(con: Connection) -> list[dict[str, Any]]:
    """Every run, newest first, as plain dicts (JSON-ready); ``uploaded_by`` is None when unknown."""
    cur = con.execute(f"SELECT {RUN_SELECT} FROM runs ORDER BY created_at DESC, run_id")
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        d = dict(zip(cols, row, strict=True))
        d["created_at"] = d["created_at"].isoformat() + "Z"
        d["tags"] = list(d["tags"] or [])
        out.append(d)
    return out


def _update_run(con: Connection, sql: str, params: list[Any]) -> None:
    def work() -> None:
        with transaction(con):
            con.execute(sql, params)

    if isinstance(con, Store):
        con.retrying(work)
    else:
        work()


def set_name(con: Connection, run_id: str, name: str) -> None:
    _update_run(con, "UPDATE runs SET name = ? WHERE run_id = ?", [name, run_id])


def set_tags(con: Connection, run_id: str, tags: list[str]) -> None:
    _update_run(con, "UPDATE runs SET tags = ? WHERE run_id = ?", [sorted(set(tags)), run_id])


def tags_of(con: Connection, run_id: str) -> list[str]:
    """The run's tags (empty for an unknown run)."""
    row = con.execute("SELECT tags FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return list(row[0] or []) if row else []


def runs_with_tag(con: Connection, tag: str) -> list[str]:
    """The ids of the runs that carry ``tag``, newest first."""
    rows = con.execute(
        "SELECT run_id FROM runs WHERE list_contains(tags, ?) ORDER BY created_at DESC, run_id",
        [tag],
    ).fetchall()
    return [str(r[0]) for r in rows]


def move_tag(con: Connection, run_id: str, tag: str) -> list[str]:
    """Give ``tag`` to ``run_id`` alone (a baseline tag names one run): it is taken from every
    other run that had it, in the same transaction. Returns the ids it was taken from."""
    holders = [r for r in runs_with_tag(con, tag) if r != run_id]

    def work() -> None:
        with transaction(con):
            con.execute(
                "UPDATE runs SET tags = list_filter(tags, t -> t <> ?) "
                "WHERE list_contains(tags, ?) AND run_id <> ?",
                [tag, tag, run_id],
            )
            con.execute(
                "UPDATE runs SET tags = list_sort(list_distinct(list_append(tags, ?))) "
                "WHERE run_id = ?",
                [tag, run_id],
            )

    if isinstance(con, Store):
        con.retrying(work)
    else:
        work()
    return holders


def now_utc() -> dt.datetime:
    """Now, UTC, without a zone (how ``runs.created_at`` is stored)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
