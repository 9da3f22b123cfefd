"""Issue 24 in a real browser: the Perfetto hand-off page speaks Perfetto's postMessage protocol
(PING until PONG, then the trace) to a LOCAL receiver page that answers as Perfetto's UI does; the
Run page offers it for the rank and window on the page. No network."""

from __future__ import annotations

import functools
import json
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Server, sample_ids, wait_idle

pytestmark = pytest.mark.browser

# Answers like ui.perfetto.dev: PONG to a PING (to the sender's origin), then takes
# {perfetto: {buffer, title, fileName}} and shows what it got.
RECEIVER = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>receiver</title></head>
<body><pre id="out">waiting</pre><script>
let pings = 0;
window.addEventListener("message", (evt) => {
  if (evt.data === "PING") { pings++; evt.source.postMessage("PONG", evt.origin); return; }
  const p = evt.data && evt.data.perfetto;
  if (!p) return;
  const doc = JSON.parse(new TextDecoder().decode(p.buffer));
  document.getElementById("out").textContent = JSON.stringify({
    pings: pings, title: p.title, fileName: p.fileName, bytes: p.buffer.byteLength,
    isArrayBuffer: p.buffer instanceof ArrayBuffer, events: doc.traceEvents.length});
});
</script></body></html>"""
SILENT = "<!DOCTYPE html><html><body>never answers</body></html>"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_site(tmp_path):
    (tmp_path / "receiver.html").write_text(RECEIVER)
    (tmp_path / "silent.html").write_text(SILENT)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=tmp_path))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield tmp_path, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _trace() -> bytes:
    doc = {"traceEvents": [{"ph": "X", "name": f"k{i}", "ts": i, "dur": 1} for i in range(5)]}
    return json.dumps(doc).encode()


def test_handoff_speaks_perfetto_postmessage(local_site, new_page, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.perfetto import handoff_html

    folder, base = local_site
    trace = _trace()
    (folder / "handoff.html").write_text(
        handoff_html(trace, title="run r0", file_name="t.json", url=f"{base}/receiver.html")
    )
    page = new_page()
    page.goto(f"{base}/handoff.html")
    with page.expect_popup() as popup_info:
        page.get_by_role("button", name="Open in Perfetto UI").click()
    popup = popup_info.value
    # the popup opens as about:blank and then loads the receiver: a predicate that reads #out
    # must allow for the page that has none yet
    popup.wait_for_function(
        "(() => { const o = document.getElementById('out');"
        " return o !== null && o.textContent !== 'waiting'; })()"
    )
    got = json.loads(popup.locator("#out").inner_text())
    assert got["pings"] >= 1 and got["isArrayBuffer"] is True
    assert got == {**got, "title": "run r0", "fileName": "t.json", "bytes": len(trace), "events": 5}
    page.locator("#status").get_by_text("Sent to Perfetto.").wait_for()
    # the fallback: the download link gives the same bytes
    with page.expect_download() as d:
        page.get_by_role("link", name="Download the trace").click()
    dest = tmp_path / "dl.json"
    d.value.save_as(dest)
    assert d.value.suggested_filename == "t.json" and dest.read_bytes() == trace


def test_handoff_says_when_perfetto_does_not_answer(local_site, new_page) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.perfetto import handoff_html

    folder, base = local_site
    (folder / "h2.html").write_text(
        handoff_html(_trace(), title="t", file_name="t.json", url=f"{base}/silent.html", wait_s=0.5)
    )
    page = new_page()
    page.goto(f"{base}/h2.html")
    with page.expect_popup():
        page.get_by_role("button", name="Open in Perfetto UI").click()
    page.locator("#status").get_by_text("Perfetto did not answer", exact=False).wait_for()


def test_run_page_offers_the_window_to_perfetto(server: Server, new_page, tmp_path) -> None:  # type: ignore[no-untyped-def]
    before, _ = sample_ids(server)
    page = new_page()
    page.goto(f"{server.url}/run?run={before}")
    wait_idle(page)
    page.get_by_role("button", name="Open these events in Perfetto").click()
    wait_idle(page)
    # the hand-off's own frame (the page has others, e.g. the one keeping a URL's section in view)
    frame = page.frame_locator('iframe[srcdoc*="Open in Perfetto UI"]')
    frame.get_by_role("button", name="Open in Perfetto UI").wait_for()
    with page.expect_download() as d:
        frame.get_by_role("link", name="Download the trace").click()
    dest = tmp_path / "run.json"
    d.value.save_as(dest)
    assert d.value.suggested_filename.startswith("before_rank0_")
    doc = json.loads(dest.read_bytes())
    names = {e["name"] for e in doc["traceEvents"]}
    # the analysed window of the sample (steps 269-273, the plot unzoomed): its five steps
    assert {n for n in names if n.startswith("ProfilerStep#")} == {
        f"ProfilerStep#{i}" for i in range(269, 274)
    }
    assert doc["deviceProperties"]
