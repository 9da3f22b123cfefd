"""Uploaded traces -> temp files -> ``ingest_paths``: the upload path of the Runs page.

Streamlit hands us file-like objects; each is copied in 1 MiB chunks to a private temp directory
(never kept whole in the session), ingested in ONE transaction, and the directory is removed. Rank
files of one run go into one directory, which the loader reads as one run (rank from the trace's
``distributedInfo`` or the file name). On any error nothing is stored.
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
import tempfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from gpuscope.analysis import run_views
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import RunResult, distinct_name, ingest_paths
from gpuscope.ingest.memory_snapshot import (
    MAX_SNAPSHOT_BYTES,
    SNAPSHOT_SUFFIXES,
    read_snapshot,
)
from gpuscope.ingest.memory_snapshot import META_KEY as SNAPSHOT_KEY
from gpuscope.ingest.naming import meta_from_head, upload_name
from gpuscope.store import Connection
from gpuscope.store.errors import StoreError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
SERIES = (".jsonl", ".jsonl.gz")  # an NVML series (gpuscope sample / gpuscope.capture)
ACCEPTED = (".json", ".json.gz", ".gz", *SERIES)
UPLOAD_TYPES = [
    "json",
    "gz",
    "jsonl",
    "pickle",
    "pkl",
]  # what the uploader offers (st.file_uploader's type)
ONE_RUN = "one run's ranks"
SEPARATE = "separate runs"

Progress = Callable[[float, str], None]  # (fraction 0..1, text)


class Upload(Protocol):
    """What ``st.file_uploader`` returns (an ``UploadedFile``), or any named binary stream."""

    name: str

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...


def safe_name(name: str) -> str:
    """The file name part only, with anything odd replaced (uploads name files, not paths)."""
    base = Path(name.replace("\\", "/")).name
    base = re.sub(r"[^A-Za-z0-9._+\- ]", "_", base).lstrip(".")
    return base or "trace.json"


def is_series_name(name: str) -> bool:
    """Whether an uploaded file is named like an NVML series (``.jsonl``, ``.jsonl.gz``)."""
    return name.lower().endswith(SERIES)


def check_names(files: Sequence[Upload]) -> None:
    """Raise IngestError for a file whose name is neither a trace (.json / .json.gz) nor an NVML
    series (.jsonl)."""
    for f in files:
        if not f.name.lower().endswith(ACCEPTED):
            raise IngestError(
                f.name,
                "not a trace or an NVML series: expected .json, .json.gz or .jsonl",
            )


HEAD_BYTES = 64 * 1024  # of a trace's JSON text read for its name before ingest


def head_text(f: Upload) -> str:
    """The first ``HEAD_BYTES`` of an upload's JSON text (gunzipped when it is gzip); ``""`` when
    unreadable (the ingest that follows names the problem)."""
    try:
        f.seek(0)
        raw = f.read(HEAD_BYTES if not f.name.lower().endswith(".gz") else 4 * HEAD_BYTES)
        f.seek(0)
        if raw[:2] == b"\x1f\x8b":
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, HEAD_BYTES)
        return raw[:HEAD_BYTES].decode("utf-8", "replace")
    except (OSError, zlib.error, ValueError):
        return ""


def run_name_for(files: Sequence[Upload]) -> str:
    """The default name of uploaded files that form one run (``ingest.naming``): their common
    stem without rank parts, else the model, host and date read from the first file's head."""
    files = [f for f in files if not is_series_name(f.name)] or list(files)
    names = [safe_name(f.name) for f in files]
    first = min(files, key=lambda f: f.name) if files else None
    meta = meta_from_head(head_text(first)) if first is not None else {}
    return upload_name(names, meta)


def trace_files(files: Sequence[Upload]) -> tuple[list[Upload], list[str]]:
    """A dropped folder's files: when some are named like torch.profiler traces
    (``*.pt.trace.json[.gz]``), those, the NVML series beside them (``*.jsonl``: attached to
    the run, as ``gpuscope ingest FOLDER`` does) and a memory snapshot (``*.pickle``) are the run,
    and the rest (``timing.json`` …) are left out; returns (kept, names left out)."""
    traces = [
        f
        for f in files
        if ".pt.trace.json" in f.name.lower() or f.name.lower().endswith(SNAPSHOT_SUFFIXES)
    ]
    kept = traces + [f for f in files if is_series_name(f.name) and f not in traces]
    if not traces or len(kept) == len(files):
        return list(files), []
    return kept, sorted(f.name for f in files if f not in kept)


def _copy(src: Upload | BinaryIO, dest: Path) -> int:
    src.seek(0)
    with dest.open("wb") as out:
        shutil.copyfileobj(src, out, CHUNK)  # type: ignore[misc]
        return out.tell()


def ingest_uploads(
    con: Connection,
    files: Sequence[Upload],
    *,
    mode: str = ONE_RUN,
    name: str | None = None,
    tags: Sequence[str] = (),
    progress: Progress | None = None,
    tmp_root: str | None = None,
    untraced_step_ms: float | None = None,
    uploaded_by: str | None = None,
    summary: run_views.SummaryLater | None = None,
) -> list[RunResult]:
    """Store uploaded traces; raise IngestError (one line, nothing stored) on any bad file.

    ``mode`` is ``ONE_RUN`` (all files are ranks of one run) or ``SEPARATE`` (one run per file).
    ``untraced_step_ms``: the step time measured without the profiler, stored with the run(s) as
    ``gpuscope.capture`` would have (``gpuscope ingest --untraced-step-ms``).
    ``uploaded_by``: the signed-in user (``runs.uploaded_by``); None without sign-in.
    ``summary``: the hook that computes each rank's summary (default: a new
    ``SummaryLater(store_after_ingest)``); a huge rank's, computed once the upload has committed,
    is left to its page where DuckDB runs out of memory there (``summary.failed`` says which).
    """
    snaps = [f for f in files if f.name.lower().endswith(SNAPSHOT_SUFFIXES)]
    files = [f for f in files if f not in snaps]
    if not files:
        raise IngestError(
            "upload", "no files" if not snaps else "a memory snapshot needs its trace"
        )
    check_names(files)
    extra: dict[str, object] = {}
    if len(snaps) > 1:
        raise IngestError(snaps[1].name, "one memory snapshot per upload")
    if snaps:  # read with the restricted unpickler before anything is stored
        snaps[0].seek(0)
        extra[SNAPSHOT_KEY] = read_snapshot(snaps[0].name, snaps[0].read(MAX_SNAPSHOT_BYTES + 1))
    report = progress or (lambda _f, _t: None)
    with tempfile.TemporaryDirectory(prefix="gpuscope-upload-", dir=tmp_root) as tmp:
        root = Path(tmp)
        if mode == ONE_RUN and len(files) > 1:
            run_dir = root / safe_name(name or run_name_for(files))
            run_dir.mkdir()
            paths: list[Path] = [run_dir]
            targets = [run_dir / safe_name(f.name) for f in files]
        else:
            targets = []
            for i, f in enumerate(files):
                d = root / str(i)
                d.mkdir()
                targets.append(d / safe_name(f.name))
            paths = list(targets)
        if len({t.name for t in targets}) != len(targets) and mode == ONE_RUN:
            raise IngestError(
                "upload", "two files have the same name; rank files need distinct names"
            )
        total = len(files)
        for i, (f, t) in enumerate(zip(files, targets, strict=True)):
            report(0.1 * i / total, f"Saving {f.name} ({i + 1}/{total})")
            _copy(f, t)

        grand_total = sum(t.stat().st_size for t in targets) or 1
        seen = {"base": 0, "last_done": 0, "last_total": 0}

        def on_bytes(done: int, run_total: int) -> None:
            # the loader reports per run; a smaller count means the next run has started
            if done < seen["last_done"] or (run_total != seen["last_total"] and seen["last_total"]):
                seen["base"] += seen["last_total"]
            seen["last_done"], seen["last_total"] = done, run_total
            overall = min(seen["base"] + done, grand_total)
            report(
                0.1 + 0.9 * overall / grand_total,
                f"Ingesting… {overall / 1e6:,.1f} / {grand_total / 1e6:,.1f} MB",
            )

        run_name = name if (name and len(paths) == 1) else None
        if run_name is None and mode == ONE_RUN and len(files) > 1:
            run_name = distinct_name(con, run_name_for(files))
        try:
            meta: dict[str, object] | None = dict(extra)
            if untraced_step_ms:
                meta["gpuscope.untraced_step_ms"] = untraced_step_ms  # type: ignore[index]
            meta = meta or None
            results = ingest_paths(
                con,
                paths,
                name=run_name,
                tags=list(tags),
                progress=on_bytes,
                metadata=meta,
                uploaded_by=uploaded_by,
                # each rank's summary (a huge rank's: after the commit)
                after_trace=summary or run_views.SummaryLater(run_views.store_after_ingest),
            )
        except (
            IngestError,
            StoreError,
        ) as e:  # name the file as the user knows it, not its temp path
            shown = {str(t): f.name for f, t in zip(files, targets, strict=True)}
            shown.update({str(p): "the uploaded files" for p in paths if p.is_dir()})
            kind = StoreError if isinstance(e, StoreError) else IngestError
            raise kind(shown.get(e.path, Path(e.path).name), e.problem) from None
        report(1.0, "Done")
        return results


# -- the file chooser's upload URLs, through a rerun ----------------------------------------------
# A file chosen in st.file_uploader is not uploaded until the browser has the server's answer to
# its request for upload URLs (a ``file_urls_response`` ForwardMsg), which waits in the session's
# message queue until the next flush. A full script run that starts meanwhile clears that queue,
# keeping only lifecycle messages (and toasts): the answer was dropped, the browser waited for it
# for ever, the uploader listed nothing and Ingest stayed disabled. The Runs page starts script
# runs of its own while it fills its figures in, and a loaded server flushes late, so a file
# chosen then was lost. The answer belongs to no script run, so it is kept through that clear; so
# is the answer to any other request the browser waits on (``backend_operation_response``: the
# file of a deferred st.download_button such as "Download report", a dataframe's chunk).
_KEEPS_ANSWERS = "_gpuscope_keeps_file_url_answers"
FILE_URLS_ANSWER = "file_urls_response"
ANSWERS = frozenset({FILE_URLS_ANSWER, "backend_operation_response"})  # the ForwardMsg types kept


def keep_file_url_answers() -> bool:
    """Make a session's message queue keep unsent answers (:data:`ANSWERS`: upload URLs, a
    deferred download's file) when a new script run clears it
    (``ForwardMsgQueue.clear(retain_lifecycle_msgs=True)``); they are sent at the next flush, in
    the order they were queued, after what the clear kept. Idempotent. False (and a warning in the
    log) where this Streamlit's queue is not the one this was written for: nothing is changed."""
    from streamlit.runtime.forward_msg_queue import ForwardMsgQueue

    original = ForwardMsgQueue.clear
    if getattr(original, _KEEPS_ANSWERS, False):
        return True
    probe = ForwardMsgQueue()
    if not isinstance(getattr(probe, "_queue", None), list):
        log.warning("uploads: this Streamlit's ForwardMsgQueue has no _queue list; a file chosen "
                    "while a script run starts may be lost")  # fmt: skip
        return False

    @functools.wraps(original)
    def clear(
        self: ForwardMsgQueue, retain_lifecycle_msgs: bool = False, *a: Any, **k: Any
    ) -> None:
        answers = (
            [m for m in self._queue if m.WhichOneof("type") in ANSWERS]
            if retain_lifecycle_msgs
            else []
        )
        original(self, retain_lifecycle_msgs, *a, **k)
        kept = {id(m) for m in self._queue}
        self._queue.extend(m for m in answers if id(m) not in kept)

    setattr(clear, _KEEPS_ANSWERS, True)
    ForwardMsgQueue.clear = clear  # type: ignore[method-assign]
    return True
