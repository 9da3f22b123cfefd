"""Self-contained reports of a run (and of a comparison), as Markdown or HTML, for a pull request
or a ticket: the headline, idle causes, fixes with their estimates and code, top kernels, and the
sawtooth as an SVG drawn here (no Plotly export, no browser, no network).

``gpuscope report`` and the "Download report" buttons of the Run and Compare pages both call
:func:`build_report`; everything else renders the JSON documents of ``analyze --json`` and
``compare --json`` (docs/cli-json.md), so the report says what those say.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis.fixes import ORDER_NOTE
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.verdict import fixes_lead
from gpuscope.web import html_safe, palette

if TYPE_CHECKING:
    from gpuscope.analysis.collectives import CollectiveMatch
    from gpuscope.analysis.job import JobDiagnosis
    from gpuscope.store import Connection

FORMATS = ("md", "html")
N_BUCKETS = 240
TOP_KERNELS = 10


@dataclass
class SawtoothData:
    """What the report's sawtooth draws: bucket bounds (ms from the window start), busy % per
    bucket, idle % per cause per bucket, step starts (ms), and the part of busy spent waiting in
    collectives for the last rank (% per bucket; None for a run of one rank)."""

    edges_ms: np.ndarray
    busy_pct: np.ndarray
    idle_pct: dict[str, np.ndarray]
    step_starts_ms: list[float]
    wait_pct: np.ndarray | None = None


def sawtooth_data(
    con: Connection,
    run_id: str,
    rank: int,
    n: int = N_BUCKETS,
    match: CollectiveMatch | None = None,
) -> SawtoothData:
    """Busy % and idle % by cause in ``n`` buckets of the rank's analysed window; with ``match``
    (the run's collectives matched across ranks) the wait inside busy too."""
    from gpuscope.analysis import sawtooth

    w = sawtooth.window_view(con, run_id, rank)
    s, e = w.start_ns, w.end_ns
    if e <= s:
        return SawtoothData(np.zeros(1), np.zeros(0), {}, [])
    dev = sawtooth.primary_device(con, run_id, rank, s, e)
    busy = sawtooth.busy_series(con, run_id, rank, s, e, n, device=dev)
    gaps = sawtooth.idle_gaps(con, run_id, rank, w.window, dev)
    shares = sawtooth.idle_shares_in_view(gaps, s, e, n) if not gaps.empty else {}
    edges = (sawtooth.bucket_edges(s, e, n) - s) / 1e6
    starts = [(int(x) - s) / 1e6 for x in w.steps["start_ns"]]
    wait = None
    if match is not None:
        from gpuscope.analysis.collectives import wait_in_view

        frac = wait_in_view(con, run_id, rank, dev, s, e, n, match)["wait_frac"]
        wait = frac.to_numpy(dtype="float64") * 100.0
    return SawtoothData(
        edges,
        busy["busy_frac"].to_numpy(dtype="float64") * 100.0,
        {c: np.asarray(v, dtype="float64") for c, v in shares.items()},
        starts,
        wait,
    )


def sawtooth_svg(
    data: SawtoothData, *, title: str = "", width: int = 900, height: int = 240
) -> str:
    """The sawtooth as an SVG: GPU busy % per bucket (blue) with its wait for other ranks beside
    it (its own colour, never drawn as busy), idle % stacked on them by cause (the dashboard's
    colours), dashed lines at step starts, axes in ms and %, and a legend."""
    left, right, top, bottom = 44, 10, 24, 46
    pw, ph = width - left - right, height - top - bottom
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" role="img">',
        f"<title>{_h(title or 'GPU busy % over time')}</title>",
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    if title:
        out.append(f'<text x="{left}" y="15" font-size="13" font-weight="bold">{_h(title)}</text>')
    n = len(data.busy_pct)
    span = float(data.edges_ms[-1] - data.edges_ms[0]) if n else 0.0
    if n == 0 or span <= 0:
        out.append(f'<text x="{left}" y="{top + ph / 2}">no GPU activity to plot</text></svg>')
        return "".join(out)
    x0 = float(data.edges_ms[0])

    def X(ms: float) -> float:
        return left + (ms - x0) / span * pw

    def Y(pct: float) -> float:
        return top + ph - min(max(pct, 0.0), 100.0) / 100.0 * ph

    xs = [X(float(v)) for v in data.edges_ms]
    busy = np.asarray(data.busy_pct, dtype="float64")
    if data.wait_pct is not None:
        wait = np.minimum(np.nan_to_num(np.asarray(data.wait_pct, dtype="float64")[:n]), busy[:n])
        layers = [("busy", palette.BUSY, busy[:n] - wait), ("wait", palette.WAIT, wait)]
    else:
        layers = [("busy", palette.BUSY, busy)]
    causes = sorted(data.idle_pct, key=lambda c: -float(np.sum(data.idle_pct[c])))
    layers += [(c, palette.cause_color(c), data.idle_pct[c]) for c in causes]
    lower = np.zeros(n)
    legend = []
    for name, color, vals in layers:
        v = np.nan_to_num(np.asarray(vals, dtype="float64")[:n])
        if not np.any(v > 0):
            lower = lower + v
            continue
        upper = lower + v
        pts = [f"M{xs[0]:.1f},{Y(lower[0]):.1f}"]
        for i in range(n):
            pts.append(f"L{xs[i]:.1f},{Y(upper[i]):.1f}L{xs[i + 1]:.1f},{Y(upper[i]):.1f}")
        for i in range(n - 1, -1, -1):
            pts.append(f"L{xs[i + 1]:.1f},{Y(lower[i]):.1f}L{xs[i]:.1f},{Y(lower[i]):.1f}")
        alpha = 0.85 if name in ("busy", "wait") else 0.6
        out.append(
            f'<path d="{"".join(pts)}Z" fill="{color}" fill-opacity="{alpha}" stroke="none">'
            f"<title>{_h(_layer_label(name))}</title></path>"
        )
        legend.append((name, color))
        lower = upper
    for ms in data.step_starts_ms:
        x = X(ms)
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#808080" '
            'stroke-dasharray="3,3" stroke-width="1"/>'
        )
    # axes
    out.append(
        f'<path d="M{left},{top}V{top + ph}H{left + pw}" fill="none" stroke="#444" '
        'stroke-width="1"/>'
    )
    for pct in (0, 50, 100):
        out.append(f'<text x="{left - 4}" y="{Y(pct) + 4:.1f}" text-anchor="end">{pct} %</text>')
    for k in range(5):
        ms = x0 + span * k / 4
        anchor = ("start", "middle", "middle", "middle", "end")[k]
        out.append(
            f'<text x="{X(ms):.1f}" y="{top + ph + 14}" text-anchor="{anchor}">'
            f"{_h(sig3(ms))} ms</text>"
        )
    lx = left
    for name, color in legend:
        label = _layer_label(name)
        out.append(
            f'<rect x="{lx}" y="{height - 16}" width="10" height="10" fill="{color}"/>'
            f'<text x="{lx + 14}" y="{height - 7}">{_h(label)}</text>'
        )
        lx += 24 + 7 * len(label)
    out.append("</svg>")
    return "".join(out)


def _layer_label(name: str) -> str:
    if name == "wait":
        return "busy, waiting for other ranks"
    return "GPU busy" if name == "busy" else f"idle: {palette.cause_label(name)}"


def _h(text: Any) -> str:
    return html_safe.text(text)


# -- the documents -------------------------------------------------------------------------------


@dataclass
class ReportParts:
    """A report's inputs: the run's ``analyze --json`` document and its sawtooth; with a
    comparison, the other run's (``base``) and the ``compare --json`` document (A = base)."""

    doc: dict[str, Any]
    saw: SawtoothData
    base: dict[str, Any] | None = None
    base_saw: SawtoothData | None = None
    comparison: dict[str, Any] | None = None
    #: the job's verdict (:mod:`gpuscope.analysis.job`): the headline and the ranks section
    job: JobDiagnosis | None = None


def report_parts(
    con: Connection, run_id: str, *, rank: int | None = None, **analysis: Any
) -> ReportParts:
    """One run's report inputs (no comparison): the ``analyze --json`` document of ``rank``
    (default: the lowest) with the job's verdict under ``job`` and the pace-setter's fixes (fixing
    a rank that waits gains nothing; docs/metrics.md), its sawtooth with the wait, and the verdict.
    ``analysis``: ``analyze_run`` options. What ``gpuscope report`` and the trackers render."""
    from gpuscope.analysis.job import diagnose, memo
    from gpuscope.analysis.report import analyze_run

    rep = analyze_run(con, run_id, rank=rank, **analysis)
    report_of = memo(lambda r: analyze_run(con, run_id, rank=r, **analysis), rep)
    job = diagnose(con, run_id, report_of)
    doc = rep.to_json()
    doc["job"] = job.to_json()
    doc["recommendations"] = [r.to_json() for r in report_of(job.fix_rank).recommendations]
    saw = sawtooth_data(con, run_id, rep.rank, match=rep.collectives)
    return ReportParts(doc, saw, job=job)


def build_report(
    con: Connection,
    run_id: str,
    *,
    fmt: str = "md",
    rank: int | None = None,
    compare_to: str | None = None,
    **analysis: Any,
) -> str:
    """The report of one rank of ``run_id`` (default: the lowest) under the job's verdict
    (:func:`report_parts`); with ``compare_to``, of that run (A, before) against ``run_id`` (B,
    after). ``analysis``: ``analyze_run`` options. Raises ValueError for an unknown rank or
    format, or a run that is not a trace run."""
    from gpuscope.analysis.compare import compare_runs
    from gpuscope.analysis.report import analyze_run

    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
    parts = report_parts(con, run_id, rank=rank, **analysis)
    if compare_to is not None:
        base = analyze_run(con, compare_to, rank=rank, **analysis)
        parts.base = base.to_json()
        parts.base_saw = sawtooth_data(con, compare_to, base.rank)
        parts.comparison = compare_runs(con, compare_to, run_id, **analysis).to_json()
    return render(parts, fmt)


def render(parts: ReportParts, fmt: str) -> str:
    """``parts`` as a Markdown or HTML document."""
    return render_html(parts) if fmt == "html" else render_markdown(parts)


def _title(parts: ReportParts) -> str:
    r = parts.doc["run"]
    if parts.base is not None:
        return f"gpuscope report: {parts.base['run']['name']} → {r['name']}"
    return f"gpuscope report: {r['name']}"


def _headline_rows(parts: ReportParts) -> list[tuple[str, str, str]]:
    """The run, then the job's verdict (:func:`gpuscope.analysis.job.headline_rows`: what every
    face shows), then the shown rank's own figures."""
    from gpuscope.analysis.job import headline_rows

    doc = parts.doc
    st = doc["step_time_ms"]
    tp = doc.get("throughput") or {}
    rows = [
        ("run", f"{doc['run']['name']} ({doc['run']['id']})", ""),
        ("GPU", str(doc["run"].get("gpu") or "-"), ""),
        ("steps", str(doc["window"]["steps"]), ""),
    ]
    if parts.job is not None:
        rows += [(r.label, r.value, r.note) for r in headline_rows(parts.job)]
    wait = doc.get("gpu_wait_pct")
    rows += [
        (
            f"rank {doc['rank']}: step spans",
            f"{sig3(st['p50'])} ms median, {sig3(st['mean'])} ms mean",
            "CPU start to the next step's: a rank that waits shows the pace only in its waits",
        ),
        (
            f"rank {doc['rank']}: GPU busy",
            _pct(doc.get("gpu_busy_pct"))
            + (f", of it waiting for other ranks {_pct(wait)}" if wait else ""),
            "",
        ),
        (f"rank {doc['rank']}: GPU idle", _pct(doc["idle"].get("pct")), ""),
    ]
    if tp.get("tokens_per_s"):
        rows.append(("throughput", f"{sig3(tp['tokens_per_s'])} tokens/s", ""))
    elif tp.get("samples_per_s"):
        rows.append(("throughput", f"{sig3(tp['samples_per_s'])} samples/s", ""))
    return rows


def _rank_rows(job: JobDiagnosis) -> list[tuple[str, str, str, str, str, str, str]]:
    """The ranks section's table: every rank by the wait it causes (the pace-setter first)."""
    from gpuscope.analysis.job import rank_rows

    return [
        (
            f"{s.rank}" + (" (pace-setter)" if s.rank == job.pace_setter else ""),
            _pct(s.split.busy_pct),
            _pct(s.split.wait_pct),
            _pct(s.split.compute_pct),
            _pct(s.split.idle_pct),
            f"{sig3(s.caused_wait_ms_per_step)} ms",
            f"{sig3(s.step_p50_ms)} ms",
        )
        for s in rank_rows(job)
    ]


_RANK_HEAD = (
    "rank",
    "GPU busy",
    "of it waiting",
    "compute",
    "idle",
    "wait it causes per step",
    "its median step span",
)


def _ranks_lead(job: JobDiagnosis) -> str:
    """The ranks section's sentence: the pace-setter and the wait it costs."""
    if job.wait_ms_per_step is not None and job.waiting_rank is not None:
        return (
            f"Rank {job.pace_setter} sets the pace: rank {job.waiting_rank} waits "
            f"{sig3(job.wait_ms_per_step)} ms per step for it (job step {sig3(job.step.p50_ms)} ms). "
            "The wait is inside GPU busy: a waiting rank's GPU is busy but does no work."
        )
    return (
        f"Rank {job.pace_setter} sets the pace (its steps end last; no collectives matched "
        f"across ranks). Job step {sig3(job.step.p50_ms)} ms."
    )


def _cause_rows(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    idle = doc["idle"]
    n = max(1, int(doc["window"]["steps"] or 1))
    rows = [
        (palette.cause_label(c), _pct(idle["causes_pct"].get(c)), f"{sig3(us / n / 1e3)} ms")
        for c, us in sorted(idle["causes"].items(), key=lambda kv: -kv[1])
        if us > 0
    ]
    return rows


def _kernel_rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    top = ((doc.get("kernels") or {}).get("top") or [])[:TOP_KERNELS]
    return [
        (
            str(k.get("short_name") or k.get("name")),
            str(k.get("category") or "-"),
            str(k.get("count")),
            f"{sig3(k.get('total_us', 0) / 1e3)} ms",
            _pct(k.get("share_pct")),
        )
        for k in top
    ]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{sig3(v)} %"


def _svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def _compare_rows(cmp: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The comparison's rows: the jobs' figures first (``job``), then the compared ranks'."""
    return [
        (
            f"{m['metric']} ({m['unit']})",
            sig3(m["a"]),
            sig3(m["b"]),
            m["change"]
            if m.get("delta_pct") is None and m["unit"] == "%"
            else "-"
            if m.get("delta_pct") is None
            else f"{m['delta_pct']:+.1f}%",
        )
        for m in [*cmp.get("job", []), *cmp["metrics"]]
    ]


# -- Markdown --------------------------------------------------------------------------------------


#: What GitHub-flavoured Markdown turns into a link by itself: a URL (``scheme://``), ``www.``,
#: an e-mail address. A word joiner (U+2060, invisible) inside each keeps a run's or kernel's
#: name plain text in a report, as the dashboard does (``gpuscope.web.ui.md``).
_AUTOLINK = re.compile(r"(:)(//)|\b(www)(\.)|(@)", re.IGNORECASE)
_WJ = "\u2060"


def _break_autolink(m: re.Match[str]) -> str:
    if m.group(5):
        return _WJ + m.group(5)
    return _WJ.join(g for g in m.groups() if g)


def _md(text: Any) -> str:
    out = " ".join(str(text).split())
    for ch in "\\|<>`*_[]":
        out = out.replace(ch, "\\" + ch)
    return _AUTOLINK.sub(_break_autolink, out)


def _md_table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
    return lines


def render_markdown(parts: ReportParts) -> str:
    """The report as GitHub-flavoured Markdown; the sawtooth is an SVG data URI image."""
    doc = parts.doc
    out = [f"# {_md(_title(parts))}", ""]
    if parts.comparison is not None:
        cmp = parts.comparison
        out += ["## Comparison", ""]
        if cmp.get("speedup_text"):
            out += [_md(cmp["speedup_text"]), ""]
        out += _md_table(("metric", "A (before)", "B (after)", "change"), _compare_rows(cmp))
        rec = cmp["recommendations"]
        out += [
            "",
            f"Fixes resolved by B: {_md(', '.join(rec['resolved']) or 'none')}; still open: "
            f"{_md(', '.join(rec['remaining']) or 'none')}; new: {_md(', '.join(rec['new']) or 'none')}",
            "",
        ]
    out += ["## Headline", ""]
    out += _md_table(("figure", "value", "note"), _headline_rows(parts))
    for w in doc.get("warnings") or []:
        out += ["", f"> ⚠ {_md(w)}"]
    out += ["", "## GPU busy over time", ""]
    if parts.base_saw is not None and parts.base is not None:
        svg = sawtooth_svg(parts.base_saw, title=f"A: {parts.base['run']['name']}")
        out += [f"![sawtooth of A]({_svg_data_uri(svg)})", ""]
    svg = sawtooth_svg(parts.saw, title=f"{doc['run']['name']}, rank {doc['rank']}")
    out += [f"![sawtooth]({_svg_data_uri(svg)})", ""]
    out += ["## Why the GPU sat idle", ""]
    causes = _cause_rows(doc)
    out += (
        _md_table(("cause", "% of the window", "per step"), causes) if causes else ["No idle time."]
    )
    job = parts.job
    if job is not None and job.distributed:
        out += ["", "## Ranks", "", _md(_ranks_lead(job)), ""]
        out += _md_table(_RANK_HEAD, _rank_rows(job))
    out += ["", "## Fixes", ""]
    if job is not None and job.distributed:
        out += [_md(fixes_lead(job)), ""]
    recs = doc.get("recommendations") or []
    if not recs:
        out += ["No fix with a cost above noise.", ""]
    else:
        out += [_md(ORDER_NOTE), ""]
    for r in recs:
        summary = (r.get("evidence") or {}).get("summary") or ""
        out += [f"### {_md(r['title'])}", ""]
        if r.get("gain"):
            out += [f"**Estimate:** {_md(r['gain'])}.", ""]
        for x in (r.get("why"), summary):
            out += [_md(x), ""] if x else []
        fence = "````" if "```" in r["fix"] else "```"
        out += [f"{fence}python", r["fix"], fence, ""]
    out += ["## Top kernels", ""]
    kernels = _kernel_rows(doc)
    out += (
        _md_table(("kernel", "category", "count", "total", "share"), kernels)
        if kernels
        else ["No kernels."]
    )
    out += [
        "",
        "_Made by gpuscope; figures as in `gpuscope analyze --json` (docs/metrics.md)._",
        "",
    ]
    return "\n".join(out)


# -- HTML ------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left}th{background:#f3f3f3}pre{background:#f6f8fa;padding:.8em;overflow:auto}
.warn{background:#fff4e5;padding:.5em;border-left:4px solid #e69f00}
.gain{font-weight:bold}figure{margin:0}svg{max-width:100%;height:auto}
"""


def _html_table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    h = "".join(f"<th>{_h(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{_h(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def render_html(parts: ReportParts) -> str:
    """The report as one HTML file: inline CSS and SVG, no script, no link to anywhere."""
    doc = parts.doc
    title = _title(parts)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_h(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_h(title)}</h1>",
    ]
    if parts.comparison is not None:
        cmp = parts.comparison
        rec = cmp["recommendations"]
        out.append('<section id="comparison"><h2>Comparison</h2>')
        if cmp.get("speedup_text"):
            out.append(f"<p>{_h(cmp['speedup_text'])}</p>")
        out.append(_html_table(("metric", "A (before)", "B (after)", "change"), _compare_rows(cmp)))
        out.append(
            f"<p>Fixes resolved by B: {_h(', '.join(rec['resolved']) or 'none')}; still open: "
            f"{_h(', '.join(rec['remaining']) or 'none')}; new: "
            f"{_h(', '.join(rec['new']) or 'none')}</p></section>"
        )
    out.append('<section id="headline"><h2>Headline</h2>')
    out.append(_html_table(("figure", "value", "note"), _headline_rows(parts)))
    out += [f'<p class="warn">⚠ {_h(w)}</p>' for w in doc.get("warnings") or []]
    out.append('</section><section id="sawtooth"><h2>GPU busy over time</h2>')
    if parts.base_saw is not None and parts.base is not None:
        base_svg = sawtooth_svg(parts.base_saw, title="A: " + str(parts.base["run"]["name"]))
        out.append(f"<figure>{base_svg}</figure>")
    svg = sawtooth_svg(parts.saw, title=f"{doc['run']['name']}, rank {doc['rank']}")
    out.append(f"<figure>{svg}</figure></section>")
    out.append('<section id="causes"><h2>Why the GPU sat idle</h2>')
    causes = _cause_rows(doc)
    out.append(
        _html_table(("cause", "% of the window", "per step"), causes)
        if causes
        else "<p>No idle time.</p>"
    )
    job = parts.job
    if job is not None and job.distributed:
        out.append('</section><section id="ranks"><h2>Ranks</h2>')
        out.append(f"<p>{_h(_ranks_lead(job))}</p>")
        out.append(_html_table(_RANK_HEAD, _rank_rows(job)))
    out.append('</section><section id="fixes"><h2>Fixes</h2>')
    if job is not None and job.distributed:
        out.append(f"<p>{_h(fixes_lead(job))}</p>")
    recs = doc.get("recommendations") or []
    out.append(f"<p>{_h(ORDER_NOTE)}</p>" if recs else "<p>No fix with a cost above noise.</p>")
    for r in recs:
        summary = (r.get("evidence") or {}).get("summary") or ""
        out.append(
            f'<article class="fix" id="fix-{_h(r["id"])}"><h3>{_h(r["title"])}</h3>'
            + (f'<p class="gain">Estimate: {_h(r["gain"])}.</p>' if r.get("gain") else "")
            + "".join(f"<p>{_h(x)}</p>" for x in (r.get("why"), summary) if x)
            + f"<pre><code>{_h(r['fix'])}</code></pre></article>"
        )
    out.append('</section><section id="kernels"><h2>Top kernels</h2>')
    kernels = _kernel_rows(doc)
    out.append(
        _html_table(("kernel", "category", "count", "total", "share"), kernels)
        if kernels
        else "<p>No kernels.</p>"
    )
    out.append(
        "</section><p><small>Made by gpuscope; figures as in <code>gpuscope analyze --json"
        "</code> (docs/metrics.md).</small></p></body></html>"
    )
    return "\n".join(out)
