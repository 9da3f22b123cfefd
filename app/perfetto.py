"""Open a rank's events in Perfetto's UI: a hand-off page that speaks Perfetto's ``postMessage``
protocol (open the UI, send ``PING`` until it answers ``PONG``, then send the trace as
``{perfetto: {buffer, title, fileName}}``), with a plain download link as the fallback.

The trace is a trimmed Kineto JSON rebuilt from the store
(:func:`gpuscope.analysis.trace_export.trimmed_trace_bytes`); the page embeds it, so it needs
nothing but a browser (and Perfetto's UI, which loads the trace locally in the browser).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from gpuscope.web import html_safe

if TYPE_CHECKING:
    from gpuscope.store import Connection

PERFETTO_URL = "https://ui.perfetto.dev"

#: The hand-off's look: its two controls drawn as the dashboard's secondary buttons (Streamlit's
#: rounded, bordered button; the accent colour of app/web/.streamlit/config.toml on hover), light
#: or dark as the browser prefers.
HANDOFF_CSS = """
:root{color-scheme:light dark;--fg:#31333f;--line:rgba(49,51,63,0.2);--bg:#fff;--accent:#1f6fc5}
@media (prefers-color-scheme:dark){:root{--fg:#fafafa;--line:rgba(250,250,250,0.2);
--bg:#0e1117;--accent:#5aa2f0}}
body{font-family:"Source Sans Pro","Source Sans 3",system-ui,sans-serif;font-size:14px;margin:0;
padding:2px 1px;color:var(--fg);background:transparent;display:flex;align-items:center;gap:8px}
button,a.button{display:inline-flex;align-items:center;justify-content:center;box-sizing:border-box;
min-height:38px;padding:0.25rem 0.75rem;border:1px solid var(--line);border-radius:0.5rem;
background:var(--bg);color:inherit;font:inherit;line-height:1.6;text-decoration:none;
cursor:pointer;user-select:none}
button:hover,a.button:hover{border-color:var(--accent);color:var(--accent)}
button:focus-visible,a.button:focus-visible{outline:none;box-shadow:0 0 0 0.2rem var(--accent)}
#status{opacity:0.7}
"""


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
    "Download the trace" link. ``url``: Perfetto's UI (tests give a local receiver page).

    Every value from data is encoded for where it goes (:mod:`gpuscope.web.html_safe`): the
    title and file name as HTML text and attribute, the script's constants as script-safe JSON;
    the page holds exactly one ``<script>`` element whatever the names hold."""
    js_consts = html_safe.script_json(
        {
            "url": url,
            "title": title,
            "fileName": file_name,
            "tries": int(wait_s / 0.05),
            "b64": base64.b64encode(trace).decode("ascii"),
        }
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html_safe.text(title)}</title>
<style>{HANDOFF_CSS}</style></head>
<body><button id="open" type="button">Open in Perfetto UI</button>
<a id="download" class="button" download="{html_safe.text(file_name)}" href="#">Download the trace</a>
<span id="status"></span>
<script>
const C = {js_consts};
const ORIGIN = new URL(C.url).origin;
const B64 = C.b64;
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
