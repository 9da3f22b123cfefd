"""The Run page's paint script (views.paint_script): a constant but for a key reduced to ASCII
letters, digits and ``_``, whatever the run's id or name holds."""

from __future__ import annotations

import re

from gpuscope.web import views


def test_the_paint_script_carries_nothing_of_a_hostile_key() -> None:
    hostile = 'run_x"></script><img src=x onerror=alert(1)>\\u2028`${1}`'
    button, js = views.paint_script(hostile, plot=True, nonce=3)
    assert re.fullmatch(r"paint_[A-Za-z0-9_]+", button), button
    assert js.count("<script>") == 1 and js.count("</script>") == 1
    assert "onerror" not in js.replace(button, "")
    assert "<img" not in js and "`${1}`" not in js
    assert f".st-key-{button} button" in js and f".st-key-{button} {{" in js
    assert 'data-gpuscope-paint="3"' in js


def test_the_paint_script_waits_for_the_plot_only_where_there_is_one() -> None:
    _, with_plot = views.paint_script("run_a", plot=True, nonce=1)
    _, without = views.paint_script("run_a", plot=False, nonce=1)
    assert "!true ||" in with_plot and "!false ||" in without
    assert with_plot.replace("!true", "!false") == without
