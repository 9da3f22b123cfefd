"""Encoding data for each context of a page (script data, HTML text and attributes, Plotly labels):
the one place where text from traces, names and URLs is made inert before it joins markup."""

from __future__ import annotations

import html
import json
import re
from typing import Any

# Characters that can end a <script> element or open an HTML comment inside it ("</script>",
# "<!--"), or start an entity, plus the two line terminators older JavaScript parsers refused in
# string literals: each becomes its \uXXXX escape, which JSON and JavaScript read back unchanged.
_SCRIPT_ESCAPES = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


# What DOMPurify (SAFE_FOR_XML) refuses inside an attribute value, cut in two by a word joiner.
_SANITIZER_CUTS = re.compile(r"(?<=<)(?=/)|(?<=--)(?=>)|(?<=--!)(?=>)|(?<=\])(?=>)")


def script_json(value: Any) -> str:
    """``value`` as JSON to place inside a ``<script>`` element (a JavaScript expression): ``<``,
    ``>``, ``&``, U+2028 and U+2029 written as ``\\u003c``-style escapes, so no data can close the
    element, open a comment or break the literal. ``JSON.parse`` and the script read back
    exactly ``value``. NaN and infinities are refused (``ValueError``: they are not JSON)."""
    return json.dumps(value, allow_nan=False).translate(_SCRIPT_ESCAPES)


def text(value: object) -> str:
    """``str(value)`` as HTML element text or as a double- or single-quoted attribute value:
    ``&``, ``<``, ``>``, ``"`` and ``'`` escaped (never an unquoted attribute)."""
    return html.escape(str(value), quote=True)


def st_html_attr(value: object) -> str:
    """``str(value)`` for a quoted HTML attribute (``title="…"``), as :func:`text`, kept whole by
    the sanitizer of ``st.html`` (DOMPurify drops an attribute whose value holds ``</script``,
    ``</style``…, ``-->`` or ``]>``, e.g. a kernel named ``k<float[4]>``): a word joiner (U+2060,
    invisible) goes inside each such sequence."""
    return text(_SANITIZER_CUTS.sub("\u2060", str(value)))


def plotly_text(value: object) -> str:
    """``str(value)`` for Plotly's labels and hover text, which read a subset of HTML (``<b>``,
    ``<br>``, ``<a href>``) and only some entities (``&amp;``, ``&lt;``, ``&gt;``, numeric ones):
    ``&``, ``<``, ``>`` escaped, and the ``{`` of ``%{`` written ``&#123;`` so that text placed in
    a ``hovertemplate`` is never read as a placeholder. Quotes stay as they are (Plotly would show
    ``&quot;`` as written; outside a tag they are harmless)."""
    return html.escape(str(value), quote=False).replace("%{", "%&#123;")
