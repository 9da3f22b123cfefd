"""Stored samples ingested once per test process (issue 45): many tests ingest a sample run only to
have something to show (a page, a CLI answer, a report). A plain ingest of a sample is 0.2-0.4 CPU
s, one that stores the run's parts and ``analyze`` document (``gpuscope ingest``'s hook,
``rank_summary.store_after_ingest_with_document``) 1-3 s (the DDP pair 2.8); a copy of the
store, some ms. The first :func:`stored_copy` of a key in a process builds a template store by
calling ``build(path)`` (it ingests what it wants, with whatever ``after_trace`` it wants, closes
the store, and may return anything: run ids, a text computed from the events); every call, the
first too, copies the template to ``dest`` (a local store: a DuckLake folder, or a DuckDB file,
copied whole; the lake opens with its data path overridden to its own folder,
gpuscope/store/opening.py) and returns what ``build`` returned. The test works on its own copy,
never on the template; what it checks is computed on that copy, never taken from the template's
build where the test compares a fresh computation with what was stored.

Each process has its own templates, in a temporary folder of its own removed at its exit (pytest-
xdist's workers are processes; a child forked from one starts with none). Two threads asking for
one key build it once. A ``build`` that raises leaves no template: the next call builds again.
A test whose subject is the ingest itself (what it writes, its speed, its errors) ingests on its
own, not through here."""

from __future__ import annotations

import atexit
import copy
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from processes import alive

T = TypeVar("T")

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
PREFIX = "gpuscope-stored-samples-"  # + pid + "-" + random: the templates of one process

_lock = threading.Lock()
_key_locks: dict[str, threading.Lock] = {}
_templates: dict[str, tuple[Path, Any]] = {}
_root: Path | None = None
_owner = os.getpid()


def _reset_in_child() -> None:
    """A forked child: none of its parent's templates or locks (another thread of the parent may
    have held one at the fork), and its parent's folder is not its own to remove."""
    global _lock, _root, _owner
    _lock = threading.Lock()
    _key_locks.clear()
    _templates.clear()
    _root = None
    _owner = os.getpid()


os.register_at_fork(after_in_child=_reset_in_child)


def _remove_root() -> None:
    if _root is not None and os.getpid() == _owner:
        shutil.rmtree(_root, ignore_errors=True)


atexit.register(_remove_root)


def _folder() -> Path:
    """This process's folder of templates (under ``_lock``); those of processes that died
    without removing theirs (killed, or left by ``os._exit``) are swept first."""
    global _root
    if _root is None:
        base = Path(tempfile.gettempdir())
        for old in base.glob(f"{PREFIX}*"):
            pid = old.name[len(PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        _root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
    return _root


def _template(key: str, build: Callable[[Path], T]) -> tuple[Path, T]:
    with _lock:
        if key in _templates:
            return _templates[key]
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:  # one build of a key at a time; others of other keys go on
        with _lock:
            if key in _templates:
                return _templates[key]
            at = Path(tempfile.mkdtemp(prefix="template-", dir=_folder())) / "store"
        built = False
        try:
            made = build(at)
            built = True
        finally:  # a build that raised leaves no template; its error goes on to the test
            if not built:
                shutil.rmtree(at.parent, ignore_errors=True)
        if not at.exists():
            shutil.rmtree(at.parent, ignore_errors=True)
            raise FileNotFoundError(f"build of stored sample {key!r} wrote no store at {at}")
        with _lock:
            _templates[key] = (at, made)
            return at, made


def stored_copy(key: str, build: Callable[[Path], T], dest: Path) -> T:
    """A copy at ``dest`` (which must not exist) of the store ``build`` made for ``key`` in this
    process (built at the first call), and what ``build`` returned. ``key`` names what is built
    ("ddp+document"): one key, one ``build``. ``build(path)`` makes the store at ``path`` and
    closes it; ``path.parent`` is a folder of the template's own for files it writes (traces made
    by hand), never copied."""
    at, made = _template(key, build)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if at.is_dir():
        shutil.copytree(at, dest)
    else:  # a DuckDB file, with its write-ahead log if one was left
        shutil.copy2(at, dest)
        wal = at.with_name(at.name + ".wal")
        if wal.exists():
            shutil.copy2(wal, dest.with_name(dest.name + ".wal"))
    return copy.deepcopy(made)  # the caller's own: a test changing it changes no other's


def stored_spec_copy(key: str, build: Callable[[Path | str], T], spec: Path | str) -> T:
    """:func:`stored_copy` for a store spec as ``clitools.analysis_store`` and
    ``apptools.app_store`` give: a lake's folder (a path), or a DuckDB file (``"duckdb:PATH"``).
    ``build`` gets a spec of the same form, for the template; the kind of store is part of the
    key (a lake and a DuckDB file of the same runs are two templates)."""
    text = str(spec)
    duckdb = text.startswith("duckdb:")
    dest = Path(text.removeprefix("duckdb:"))

    def built(at: Path) -> T:
        return build(f"duckdb:{at}" if duckdb else at)

    return stored_copy(f"{key} [{'duckdb file' if duckdb else 'lake'}]", built, dest)


def beside(spec: Path | str) -> Path:
    """The folder holding the store of ``spec`` (a lake's folder or ``"duckdb:PATH"``): in a
    ``build``, the template's own folder for files it writes."""
    return Path(str(spec).removeprefix("duckdb:")).parent


def _hook_name(after_trace: Any) -> str:
    """The key's word for an ingest's ``after_trace`` hook (those the samples are stored with)."""
    from gpuscope.analysis import rank_summary as RS

    for name, hook in (
        ("no parts", None),
        ("parts", RS.store_after_ingest),
        ("parts+document", RS.store_after_ingest_with_document),
    ):
        if after_trace is hook:
            return name
    raise ValueError(f"no key for the hook {after_trace!r}: use stored_copy with a key of its own")


def sample_copy(spec: Path | str, *names: str, after_trace: Any = None) -> list[str]:
    """The sample runs ``names`` (paths under sample_traces/: ``"ddp"``, ``"multi_gpu/ddp_clean"``)
    stored by one ``ingest_paths`` call with ``after_trace`` (None, or rank_summary's
    ``store_after_ingest`` or ``store_after_ingest_with_document``), copied to ``spec`` (a lake's
    folder or ``"duckdb:PATH"``, :func:`stored_spec_copy`): their run ids, in order."""

    def build(at: Path | str) -> list[str]:
        from gpuscope.ingest.loader import ingest_paths
        from gpuscope.store import connect

        with connect(at) as con:
            done = ingest_paths(con, [SAMPLES / n for n in names], after_trace=after_trace)
            return [str(r.run_id) for r in done]

    key = f"sample_traces/{{{','.join(names)}}} ({_hook_name(after_trace)})"
    return stored_spec_copy(key, build, spec)
