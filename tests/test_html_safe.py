"""Issue 47, item 1: data is encoded for the page context it goes to (app/web/html_safe.py), and the
pages built from it (the Perfetto hand-off, the server-address line, the top-kernels table, the
colour legend, Plotly labels) keep every name inert: one script where one is meant, no element and
no attribute from a name, and the name read back exactly."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from typing import Any

import pytest
from gpuscope.analysis.kernels import KernelRow
from gpuscope.analysis.run_views import TopKernels
from gpuscope.web import html_safe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# the probe's payloads and the pieces that end a script, open a comment or break a JS literal
HOSTILE = [
    "demo</script><script>window.__pwned=1;fetch('http://127.0.0.1:9/x')</script>",
    "<img src=x onerror=window.__pwned=1>",
    "</SCRIPT ><svg onload=alert(1)>",
    "<!--<script>",
    '" onmouseover="alert(1)',
    "' autofocus onfocus='alert(1)",
    "a\u2028b\u2029c",
    "&lt;&amp;&#60;",
    "]]><![CDATA[",
    "%{customdata}<b>bold</b>",
    "\ud800 lone surrogate",
]
PIECES = st.sampled_from(
    ["</script>", "</", "<!--", "-->", "<script>", "<", ">", "&", '"', "'", "\u2028", "\u2029",
     "%{", "\\", "`", "${", "\x00", "\r\n"]
)  # fmt: skip
# any text (lone surrogates included), with the dangerous pieces mixed in often
TEXT = st.lists(st.one_of(PIECES, st.text(st.characters(exclude_categories=()))), max_size=12).map(
    "".join
)
JSONABLE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


WJ = "\u2060"
# DOMPurify's SAFE_FOR_XML rule (st.html): an attribute whose value matches is removed
DOMPURIFY_DROPS = re.compile(
    r"((--!?|])>)|<\/(style|script|title|xmp|textarea|noscript|iframe|noembed|noframes)", re.I
)


class Page(HTMLParser):
    """What an HTML parser makes of a page: its start tags (with attributes) and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in = tag

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in == "script" else self.text).append(data)

    def handle_comment(self, data: str) -> None:
        self.tags.append(("!--", {}))


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    p.close()
    return p


# -- the helper ----------------------------------------------------------------------------------


@given(JSONABLE)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_script_json_reads_back_and_never_ends_the_script(value: Any) -> None:
    enc = html_safe.script_json(value)
    assert json.loads(enc) == value
    for bad in ("</", "<!--", "<", ">", "&", "\u2028", "\u2029"):
        assert bad not in enc
    # inside a script element an HTML parser sees one script holding exactly the JSON
    p = parse(f"<script>const C = {enc};</script><p>after</p>")
    assert [t for t, _ in p.tags] == ["script", "p"] and "".join(p.scripts) == f"const C = {enc};"


@pytest.mark.parametrize("value", HOSTILE)
def test_script_json_of_each_payload(value: str) -> None:
    enc = html_safe.script_json({"title": value})
    assert json.loads(enc) == {"title": value} and "<" not in enc and "\u2028" not in enc


def test_script_json_is_read_back_by_javascript() -> None:
    """JavaScript (node) evaluates the encoding, as a script would, to the very value."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (Debian's nodejs)", pytrace=False)
    value = {"names": HOSTILE[:-1], "n": [1, 2.5, None, True]}  # a lone surrogate is not UTF-8
    js = f"const C = {html_safe.script_json(value)}; process.stdout.write(JSON.stringify(C));"
    out = subprocess.run([node, "-e", js], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == value


def test_script_json_refuses_what_is_not_json() -> None:
    with pytest.raises(ValueError):
        html_safe.script_json(float("nan"))


@given(TEXT)
@settings(max_examples=400, deadline=None)
def test_html_text_and_attribute_carry_no_markup(value: str) -> None:
    t, a = html_safe.text(value), html_safe.st_html_attr(value)
    assert not set(t + a) & set("<>\"'") and html.unescape(t) == value
    p = parse(f'<td title="{a}">{t}</td>')
    assert [tag for tag, _ in p.tags] == ["td"]  # no element, no comment from the value
    attrs = p.tags[0][1]
    assert list(attrs) == ["title"]  # no attribute from the value
    title = attrs["title"] or ""
    assert title.replace(WJ, "") == value.replace(WJ, "")  # the name, joiners aside
    assert DOMPURIFY_DROPS.search(title) is None  # st.html's sanitizer keeps the attribute
    assert "".join(p.text) == value


@given(TEXT)
@settings(max_examples=300, deadline=None)
def test_plotly_text_has_no_tag_and_no_placeholder(value: str) -> None:
    t = html_safe.plotly_text(value)
    assert "<" not in t and ">" not in t and "%{" not in t
    assert html.unescape(t) == value  # what Plotly shows (it reads &amp; &lt; &gt; &#123;)


# -- the pages built with it -----------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE[:-1])
def test_perfetto_handoff_holds_one_script_and_the_exact_name(name: str) -> None:
    from gpuscope.perfetto import handoff_html

    trace = b'{"traceEvents": []}'
    page = handoff_html(trace, title=f"{name} rank 0", file_name=f"{name}.json")
    p = parse(page)
    tags = [t for t, _ in p.tags]
    assert tags.count("script") == 1 and "img" not in tags and "svg" not in tags
    assert "!--" not in tags
    # the script's constants read back to the exact title and file name
    script = "".join(p.scripts)
    consts = script.split("const C = ", 1)[1].split(";\n", 1)[0]
    c = json.loads(consts)
    assert c["title"] == f"{name} rank 0" and c["fileName"] == f"{name}.json"
    assert f"{name} rank 0" in p.text  # the <title>, as one piece of text
    [download] = [a for t, a in p.tags if t == "a"]
    assert download["download"] == f"{name}.json"
    assert not [k for k in download if k.startswith("on")]  # no handler from the name


@given(TEXT)
@settings(max_examples=100, deadline=None)
def test_perfetto_handoff_any_title(title: str) -> None:
    from gpuscope.perfetto import handoff_html

    p = parse(handoff_html(b"{}", title=title, file_name="t.json"))
    assert [t for t, _ in p.tags].count("script") == 1
    c = json.loads("".join(p.scripts).split("const C = ", 1)[1].split(";\n", 1)[0])
    assert c["title"] == title


@pytest.mark.parametrize("base", ["", "/team", "/x</script><script>alert(1)</script>"])
def test_server_address_line_is_one_script(base: str) -> None:
    from gpuscope.web.backend_url import snippet

    p = parse(snippet(base).decode())
    assert [t for t, _ in p.tags] == ["script"]
    assert "".join(p.scripts).endswith(
        json.dumps(base).replace("<", "\\u003c").replace(">", "\\u003e") + "});"
    )


def test_top_kernels_table_shows_names_as_text() -> None:
    from gpuscope.web.views import TOP_COLUMNS, top_kernels_html

    rows = tuple(
        KernelRow(name=n, category="<b>gemm</b>", count=1, total_us=10.0, mean_us=10.0,
                  min_us=10.0, max_us=10.0, tensor_core=False, precision="<i>fp32</i>")
        for n in HOSTILE[:3]
    )  # fmt: skip
    page = top_kernels_html(TopKernels(rows, n_steps=1))
    assert page is not None
    p = parse(page)
    tags = {t for t, _ in p.tags}
    assert tags == {"style", "table", "colgroup", "col", "thead", "tr", "th", "tbody", "td"}
    titles = [a["title"] or "" for t, a in p.tags if t == "td" and "title" in a]
    assert [t.replace(WJ, "") for t in titles] == list(HOSTILE[:3])
    assert not any(DOMPURIFY_DROPS.search(t) for t in titles)  # the hover survives st.html
    assert sum(1 for t, _ in p.tags if t == "td") == len(rows) * len(TOP_COLUMNS)


def test_legend_swatch_text_is_text() -> None:
    from gpuscope.web.views import _swatch

    p = parse(_swatch("#123456", HOSTILE[1]))
    assert [t for t, _ in p.tags] == ["span", "span"] and "".join(p.text) == HOSTILE[1]


def test_heatmap_node_names_are_plotly_text() -> None:
    import pandas as pd
    from gpuscope.web.figures import rank_step_heatmap

    m = pd.DataFrame(
        {"node": [HOSTILE[1], HOSTILE[1]], "rank": [0, 0], "step": [1, 2],
         "step_ms": [1.0, 2.0], "wait_ms": [0.0, 0.0], "outlier": [False, True]}
    )  # fmt: skip
    fig = rank_step_heatmap(m)
    labels = [str(y) for tr in fig.data for y in (tr.y if tr.y is not None else ())]
    assert labels and all("<" not in y for y in labels)
    assert html.unescape(labels[0]) == f"{HOSTILE[1]} · rank 0"


def test_headline_cards_show_every_text_as_text() -> None:
    """The Run page's cards and the lines under them (``views.cards_html``, one ``st.html``
    block): only their own divs and spans, each hostile label, value, note and line read back
    exactly, the help a ``title`` that survives the sanitiser."""
    from gpuscope.web.views import Card, cards_html

    cards = [Card(h, h, h, h) for h in HOSTILE[:4]]
    page = cards_html(cards, [("First fix", HOSTILE[4]), (HOSTILE[5], "x")])
    p = parse(page)
    assert {t for t, _ in p.tags} == {"div", "span", "b"}
    titles = [a["title"] or "" for t, a in p.tags if "title" in a]
    assert [t.replace(WJ, "") for t in titles] == list(HOSTILE[:4])
    assert not any(DOMPURIFY_DROPS.search(t) for t in titles)
    text = "".join(p.text)
    for h in HOSTILE[:6]:
        assert h in text
    assert sum(1 for t, a in p.tags if a.get("class") == "gs-card") == 4
    assert cards_html([], []) == ""
