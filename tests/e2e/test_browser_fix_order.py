"""The Run page's fixes in a real browser (issue 42): the "before" sample's fixes are listed by their
estimate, DataLoader workers first, each with its estimate and range, and the larger batch, which
changes the training, after every fix that keeps it and gains 5 % or more ("Then, use a larger
batch ...": docs/metrics.md, "A fix that changes the training after the fixes that keep it");
"at most" only beside the fix whose bound is proven (the DataLoader's), never beside host_sync's
or the batch size's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Server, sample_ids, sawtooth_chart, wait_idle
from gpuscope.analysis.fixes import SIGNIFICANT_PCT

pytestmark = pytest.mark.browser

#: A fix's heading on the page: "**title** — **step time down 36.3% (range 29.8 to 38.7%)...**".
HEAD = re.compile(r"^(.+?) — (step time|time per sample) down (-?[\d.]+)% \(range ")


def test_the_run_page_lists_fixes_by_estimate(server: Server, new_page) -> None:  # type: ignore[no-untyped-def]
    before, _ = sample_ids(server)
    page = new_page()
    page.goto(f"{server.url}/run?run={before}")
    sawtooth_chart(page)
    wait_idle(page)
    page.get_by_role("heading", name="Fixes").wait_for()
    page.get_by_text(re.compile(r"— step time down [\d.]+% \(range")).first.wait_for(
        timeout=120_000
    )
    wait_idle(page)
    texts = page.locator('[data-testid="stMarkdownContainer"] p').all_inner_texts()
    heads = [(m.group(1), float(m.group(3)), t) for t in texts if (m := HEAD.match(t))]
    assert [h[0] for h in heads][:2] == [
        "Load batches in background workers",
        "Stop synchronising with the GPU every step",
    ], heads
    kept = [h[1] for h in heads if not h[0].startswith("Then, use a larger batch")]
    assert kept == sorted(kept, reverse=True) and len(kept) >= 4, heads
    [batch] = [i for i, h in enumerate(heads) if h[0].startswith("Then, use a larger batch")]
    assert heads[batch][2].split(" — ")[1].startswith("time per sample down"), heads
    assert all(h[1] < SIGNIFICANT_PCT for h in heads[batch + 1 :]), heads  # after the >= 5 % ones
    assert any(h[1] >= SIGNIFICANT_PCT for h in heads[1:batch]), heads  # it follows one here
    assert "; at most " in heads[0][2]  # the DataLoader's proven bound
    assert all("at most" not in t for _, _, t in heads[1:]), heads
    page.get_by_text("Largest estimated gain first").first.wait_for()
