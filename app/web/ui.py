"""Small helpers shared by the pages: flash messages, units, tag parsing, store actions."""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

import pandas as pd
import streamlit as st
from gpuscope.store import Connection, delete_run, set_name, set_tags, transaction
from gpuscope.web.html_safe import plotly_text

_FLASH = "_gpuscope_flash"

# -- text from data (traces, URLs, users) --------------------------------------------------------------
# Streamlit renders titles, captions, markdown, alerts and widget labels as Markdown: a run named
# ``![b](http://host/x.png)`` would make every viewer's browser fetch that image, ``[x](url)`` would
# become a link, ``:red[..]``/``$..$`` would restyle. Every string that comes from data goes through
# ``md()`` before it reaches one of them; Plotly text goes through ``plot_text()``.

NAME_MAX = 80  # characters of a name shown in titles, captions and headers; the rest on hover
# bidirectional controls (U+202E turns the rest of a line around) and other invisible formatting
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#!|<>~$:&@])")  # links, images, emphasis, HTML, directives
_MD_LEAD = re.compile(r"^([-+=>])")  # a list, heading or quote marker at the start
_MD_OL = re.compile(r"^(\d+)\.")  # "1." at the start: an ordered list
# GFM turns bare URLs, www.x.y and e-mail addresses into links by searching the text *after*
# escapes are resolved, so escaping cannot stop it: a word joiner (U+2060, invisible) breaks them.
_WJ = "\u2060"
_MD_AUTOLINK = re.compile(r"(?i)(\\:)(//)|\b(www)(\.)|(\\@)")


def plain(text: object, limit: int | None = NAME_MAX) -> str:
    """``text`` as one visible line: invisible/bidi controls removed, whitespace runs (newlines,
    tabs) made one space, cut to ``limit`` characters with "…" (``None``: no limit)."""
    t = _INVISIBLE.sub("", str(text if text is not None else ""))
    t = " ".join(t.split())
    if limit is not None and len(t) > limit:
        t = t[: max(1, limit - 1)].rstrip() + "…"
    return t


def md(text: object, limit: int | None = NAME_MAX) -> str:
    """``plain(text)`` made inert for Markdown: every punctuation character that Markdown,
    Streamlit's directives (``:red[..]``, ``:material/..:``) or LaTeX could read is
    backslash-escaped, so it shows as typed and nothing is fetched, linked or styled."""
    t = _MD_PUNCT.sub(r"\\\1", plain(text, limit))
    t = _MD_OL.sub(r"\1\\.", _MD_LEAD.sub(r"\\\1", t))
    return _MD_AUTOLINK.sub(_break_autolink, t)


def _break_autolink(m: re.Match[str]) -> str:
    if m.group(5):  # user\@host: the joiner goes before the "@"
        return _WJ + m.group(5)
    return _WJ.join(g for g in m.groups() if g)


def md_code(text: object, limit: int | None = NAME_MAX) -> str:
    """Data text as inline code (ids): backticks removed, so the span cannot be closed early."""
    return "`" + plain(text, limit).replace("`", "'") + "`"


def hover(text: object) -> str | None:
    """The full value for a tooltip (``help=``), when ``plain`` had to cut it; else ``None``.
    Tooltips render Markdown too, so this is escaped as well."""
    full = plain(text, None)
    return md(full, None) if len(full) > NAME_MAX else None


def plot_text(text: object, limit: int | None = NAME_MAX) -> str:
    """Data text for Plotly labels, which read a subset of HTML (``<a href>``, ``<b>``):
    ``plain(text)`` encoded by :func:`gpuscope.web.html_safe.plotly_text`."""
    return plotly_text(plain(text, limit))


def flash(kind: str, text: str) -> None:
    """A message shown once, at the top of the next page run (survives st.rerun / switch_page)."""
    st.session_state[_FLASH] = (kind, text)


def show_flash() -> None:
    item = st.session_state.pop(_FLASH, None)
    if item:
        kind, text = item
        {"success": st.success, "info": st.info, "warning": st.warning, "error": st.error}.get(
            kind, st.info
        )(text)


def parse_tags(text: str) -> list[str]:
    return sorted({t.strip() for t in re.split(r"[,\n]", text or "") if t.strip()})


def rename_and_tag(con: Connection, run_id: str, name: str, tags: list[str]) -> None:
    """Both in one transaction: no reader (of any process) sees the new name with the old tags."""
    with transaction(con):
        set_name(con, run_id, name)
        set_tags(con, run_id, tags)


def delete(con: Connection, run_id: str) -> bool:
    return delete_run(con, run_id)


_BEFORE = re.compile(r"(?i)before|baseline|base\b|slow|orig")
_AFTER = re.compile(r"(?i)after|fixed|optim|fast|tuned")


def default_pair(trace_runs: pd.DataFrame) -> tuple[str, str]:
    """A sensible (before, after) pair: sample runs named like before/after, else the two newest."""
    names = list(trace_runs["name"])
    ids = list(trace_runs["run_id"])
    before = [i for i, n in zip(ids, names, strict=True) if _BEFORE.search(n)]
    after = [i for i, n in zip(ids, names, strict=True) if _AFTER.search(n)]
    if before and after and before[0] != after[0]:
        return before[-1], after[-1]
    ordered = trace_runs.sort_values("created_at")
    o = list(ordered["run_id"])
    return o[-2], o[-1]


# -- units -----------------------------------------------------------------------------------------


def short_gpu(name: object) -> str:
    """A GPU's name for a narrow column: without the vendor's leading "NVIDIA " ("H100 80GB HBM3")."""
    text = str(name)
    return text[len("NVIDIA ") :] if text.startswith("NVIDIA ") and len(text) > 7 else text


def _ok(v: Any) -> TypeGuard[float]:
    """A number to show: not None, not NaN."""
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def fmt_ms(v: float | None, digits: int = 1) -> str:
    return f"{v:,.{digits}f} ms" if _ok(v) else "—"


def fmt_duration_us(v: float | None) -> str:
    """A duration given in µs in the unit that reads best: ``850.0 µs``, ``42.66 ms``, ``3.20 s``."""
    if not _ok(v):
        return "—"
    if abs(v) < 1e3:
        return f"{v:,.1f} µs"
    if abs(v) < 1e6:
        return f"{v / 1e3:,.2f} ms"
    return f"{v / 1e6:,.2f} s"


def fmt_us_as_ms(v: float | None, digits: int = 1) -> str:
    return fmt_ms(v / 1e3, digits) if _ok(v) else "—"


def fmt_pct(v: float | None, digits: int = 1) -> str:
    return f"{v:.{digits}f} %" if _ok(v) else "—"


def fmt_tflops(v: float | None) -> str:
    return f"{v:,.1f} TFLOP/s" if _ok(v) else "—"


def fmt_flops(v: float | None) -> str:
    if not _ok(v):
        return "—"
    assert v is not None
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if abs(v) >= scale:
            return f"{v / scale:,.2f} {unit}"
    return f"{v:,.0f} FLOP"


def fmt_number(v: float | None) -> str:
    """A plain number with thousands separators and no exponent: ``1,920``, ``42.7``, ``0.031``."""
    if not _ok(v):
        return "—"
    assert v is not None
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:,.2f}"
    return f"{v:.3f}" if abs(v) >= 0.001 else f"{v:.2g}"


def fmt_signed(v: float | None, suffix: str = "", *, digits: int | None = None) -> str:
    """``fmt_number`` with its sign: ``+1,920``, ``-0.031``; ``digits`` fixes the decimals."""
    if not _ok(v):
        return "—"
    assert v is not None
    body = f"{abs(v):,.{digits}f}" if digits is not None else fmt_number(abs(v))
    return ("+" if v > 0 else "-" if v < 0 else "±") + body + suffix


def fmt_rate(v: float | None, unit: str) -> str:
    """A throughput with thousands separators and its unit: ``12,345 tokens/s``, ``85.2 samples/s``."""
    if not _ok(v):
        return "—"
    assert v is not None
    return f"{v:,.0f} {unit}" if abs(v) >= 100 else f"{v:,.1f} {unit}"


def delta_pct(a: float | None, b: float | None) -> str | None:
    """B against A in per cent: ``+12.3 %``."""
    if not (_ok(a) and _ok(b)) or not a:
        return None
    assert a is not None and b is not None
    return f"{100.0 * (b - a) / abs(a):+,.1f} %"


def delta_str(a: float | None, b: float | None, unit: str, digits: int = 1) -> str | None:
    if not (_ok(a) and _ok(b)):
        return None
    assert a is not None and b is not None
    return f"{b - a:+,.{digits}f} {unit}"


def resolve_or_stop(ref: str | None, *, what: str = "run") -> str | None:
    """``db.resolve(ref)``; a name that several runs share stops the page with one line listing
    them (id and name) instead of reading as "no such run"."""
    from gpuscope.vocabulary.errors import Ambiguous
    from gpuscope.web import db

    try:
        return db.resolve(ref)
    except Ambiguous as e:
        st.error(
            f"**{md(ref)}** names more than one {what}: "
            f"{md(e.problem.removeprefix('ambiguous: '), None)}.",
            icon=":material/rule:",
        )
        st.page_link("screens/runs.py", label="Back to the runs", icon=":material/table_rows:")
        st.stop()


def not_found(kind: str, ref: str | None) -> None:
    """The message for an unknown or missing run id in the URL (no traceback)."""
    if ref:
        st.error(
            f"No run **{md(ref)}** in this store. It may have been deleted, or the link comes from "
            "another gpuscope store.",
            icon=":material/search_off:",
        )
    else:
        st.info(f"No {kind} chosen.", icon=":material/info:")
    st.page_link("screens/runs.py", label="Back to the runs", icon=":material/table_rows:")
