"""Open a rank's events in Perfetto's UI: a hand-off page that speaks Perfetto's ``postMessage``
protocol (open the UI, send ``PING`` until it answers ``PONG``, then send the trace as
``{perfetto: {buffer, title, fileName}}``), with a plain download link as the fallback.

The trace is a trimmed Kineto JSON rebuilt from the store
(:func:`gpuscope.analysis.trace_export.trimmed_trace_bytes`); the page embeds it, so it needs
nothing but a browser (and Perfetto's UI, which loads the trace locally in the browser).
"""

from __future__ import annotations

import base64
import html
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuscope.store import Connection

PERFETTO_URL = "https://ui.perfetto.dev"


def trace_for_perfetto(
    con: Connection, run_id: str, rank: int, start_ns: int | None = None, end_ns: int | None = None
) -> bytes:
    """The trimmed Kineto JSON of ``rank``'s events in ``[start_ns, end_ns)`` (trace ns)."""
    from gpuscope.analysis.trace_export import trimmed_trace_bytes

    return trimmed_trace_bytes(con, run_id, rank, start_ns, end_ns)


def handoff_html(
    trace: bytes, *, title: str, file_name: str, url: str = PERFETTO_URL, wait_s: float = 10.0
) -> str:
    """A self-contained page with an "Open in Perfetto UI" button (a click opens ``url`` and hands
    the trace over once it answers ``PONG``; ``wait_s`` later without an answer it says so) and a
    "Download the trace" link. ``url``: Perfetto's UI (tests give a local receiver page)."""
    payload = base64.b64encode(trace).decode("ascii")
    js_consts = json.dumps(
        {"url": url, "title": title, "fileName": file_name, "tries": int(wait_s / 0.05)}
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;font-size:14px;margin:4px}}
button{{padding:4px 10px;cursor:pointer}}#status{{color:#555;margin-left:8px}}</style></head>
<body><button id="open" type="button">Open in Perfetto UI</button>
<a id="download" download="{html.escape(file_name, quote=True)}" href="#">Download the trace</a>
<span id="status"></span>
<script>
const C = {js_consts};
const ORIGIN = new URL(C.url).origin;
const B64 = "{payload}";
function traceBuffer() {{
  const s = atob(B64); const a = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i);
  return a.buffer;
}}
function say(text) {{ document.getElementById("status").textContent = text; }}
document.getElementById("download").href =
  URL.createObjectURL(new Blob([traceBuffer()], {{type: "application/json"}}));
document.getElementById("open").addEventListener("click", () => {{
  const win = window.open(C.url);
  if (!win) {{ say("The pop-up was blocked: download the trace and open it in Perfetto."); return; }}
  say("Waiting for Perfetto…");
  let tries = 0;
  const timer = setInterval(() => {{
    if (++tries > C.tries) {{
      clearInterval(timer);
      say("Perfetto did not answer: download the trace and open it there.");
      return;
    }}
    win.postMessage("PING", ORIGIN);
  }}, 50);
  window.addEventListener("message", function onMessage(evt) {{
    if (evt.origin !== ORIGIN || evt.data !== "PONG") return;
    clearInterval(timer);
    window.removeEventListener("message", onMessage);
    win.postMessage({{perfetto: {{buffer: traceBuffer(), title: C.title, fileName: C.fileName}}}},
                    ORIGIN);
    say("Sent to Perfetto.");
  }});
}});
</script></body></html>
"""
