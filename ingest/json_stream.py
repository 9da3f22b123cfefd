"""Split a chrome-trace JSON stream into batches of whole events without parsing it all at once.

A vectorised (numpy) structural scan finds, outside strings, the brackets that open and close each
element of the top-level ``traceEvents`` array. Each batch is handed on as the bytes of a JSON array
of whole events, so memory is bounded by the batch size whatever the file size. Everything outside
the array (``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, ...) is small; it is
collected, before or after the events, and parsed at the end.

Accepts both chrome-trace forms: an object with ``traceEvents`` and a bare array of events.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from gpuscope.ingest import compiled_parser
from gpuscope.ingest.env import positive_int
from gpuscope.ingest.errors import IngestError

BATCH_BYTES = 4 << 20
MAX_OUTSIDE_BYTES = 256 << 20  # JSON outside the events array (metadata) we are willing to hold
# JSON before the events array: Kineto writes a few KB there (schemaVersion, deviceProperties,
# distributedInfo). It is rescanned as it grows, so its cap bounds that work (32 MiB: ~2 s).
MAX_PREFIX_BYTES = 32 << 20
ENV_MAX_EVENT = "GPUSCOPE_MAX_EVENT_BYTES"
# A Kineto event is well under 1 MiB (the largest are ops with long "Input Dims" lists); one bigger
# than this is refused instead of buffered (and rescanned) whole.
DEFAULT_MAX_EVENT_BYTES = 64 << 20
T = TypeVar("T")


def max_event_bytes() -> int:
    """Largest single trace event accepted, bytes of JSON (``$GPUSCOPE_MAX_EVENT_BYTES``)."""
    return positive_int(ENV_MAX_EVENT, DEFAULT_MAX_EVENT_BYTES)


# bytes.translate maps every byte in C at memory speed: brackets -> 1 (open) / 2 (close), the rest -> 0.
_BRACKET_TABLE = bytes(1 if c in b"{[" else 2 if c in b"}]" else 0 for c in range(256))
_DELTA = np.array([0, 1, -1], np.int8)
_WS = b" \t\r\n"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# Kineto writes one event per block, indented by 2: the bytes between two events are exactly these
# (the previous event's closing brace, the comma, the next one's opening brace). A newline cannot
# occur inside a strict JSON string, so a cut there is between events, proven by a syntax pass.
_KINETO_SEP = b"\n  },\n  {"
# Any other layout (one line, compact, an event per line, another indent): a closing brace, a comma
# and an opening brace, whitespace around the comma. It may also stand inside a string or between
# two objects nested in an event: a cut there does not prove out (the strict syntax pass of
# ``[`` + the text up to the brace + ``]`` accepts only a cut between two top-level elements).
_EVENT_SEP = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
# The tail of the last part searched first for that separator (an event is ~0.1-1 KB).
_SEP_WINDOW = 1 << 16
# Separators tried, from the last, where the splitter proves its cuts (each failed try is one
# syntax pass over the batch).
_SEP_TRIES = 4


_NON_WS = re.compile(rb"[^ \t\r\n]")


@cache
def _raw_list() -> Any:
    import msgspec

    return msgspec.json.Decoder(list[msgspec.Raw])


@cache
def _object_list() -> Any:
    """A strict syntax pass that also refuses an element that is not an object: a list of empty
    structs (every key is skipped, still parsed), half the cost of ``list[Raw]`` plus a Python
    check per element."""
    import msgspec

    class AnyObject(msgspec.Struct):
        pass

    return msgspec.json.Decoder(list[AnyObject])


def string_quotes(b: np.ndarray) -> np.ndarray:
    """Positions of the quotes that open or close strings (escaped quotes removed)."""
    q = np.flatnonzero(b == 34)
    if q.size == 0:
        return q
    after = q[q > 0]
    cand = after[b[after - 1] == 92]
    if cand.size:
        escaped = []
        raw = b.tobytes() if cand.size > 64 else None
        for p in cand.tolist():
            i = p - 1
            if raw is not None:
                while i >= 0 and raw[i] == 92:
                    i -= 1
            else:
                while i >= 0 and b[i] == 92:
                    i -= 1
            if (p - 1 - i) % 2:
                escaped.append(p)
        if escaped:
            q = np.setdiff1d(q, np.asarray(escaped, dtype=q.dtype), assume_unique=True)
    return q


def brackets(buf: bytes, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``{[]}`` outside strings and their depth change (+1/-1); the scan starts outside a string."""
    kind = np.frombuffer(buf.translate(_BRACKET_TABLE), np.uint8)
    s = np.flatnonzero(kind)
    if q.size and s.size:
        s = s[(np.searchsorted(q, s) & 1) == 0]
    return s, _DELTA[kind[s]]


def escape_controls(buf: bytes) -> bytes:
    """Escape raw control characters that sit inside strings (a known PyTorch bug writes them)."""
    b = np.frombuffer(buf, np.uint8)
    cc = np.flatnonzero(b < 32)
    if cc.size == 0:
        return buf
    q = string_quotes(b)
    cc = cc[(np.searchsorted(q, cc) & 1) == 1]
    if cc.size == 0:
        return buf
    parts = []
    prev = 0
    for p in cc.tolist():
        parts.append(buf[prev:p])
        parts.append(b"\\u%04x" % buf[p])
        prev = p + 1
    parts.append(buf[prev:])
    return b"".join(parts)


def _first_key(buf: bytes) -> tuple[int, int] | None:
    """(start, end) of the first ``"traceEvents": [`` in ``buf`` when it is the top-level
    object's key, proven by scanning only the text before it (Kineto writes a few KB there; a
    rank file's first read holds megabytes of events after it); None when that is not sure (then
    the whole buffer is scanned)."""
    m = _KEY.search(buf)
    if m is None:
        return None
    pre = buf[: m.start()]
    q = string_quotes(np.frombuffer(pre, np.uint8))
    if q.size % 2 == 0:
        _, d = brackets(pre, q)
        depth = np.cumsum(d)
        if depth.size and depth[-1] == 1 and int(depth.min()) >= 1:
            return m.start(), m.end()
    if b'/"' in pre:  # Kineto's '/"' may have moved the quotes: the head parses once mended
        try:
            mend_slash_quotes(pre.decode("utf-8", "replace"), _object_head)
        except json.JSONDecodeError:
            return None
        return m.start(), m.end()
    return None  # inside a string, nested, or after the object closed


class EventCounts:
    """The events of each batch of one file, by batch index, told by whoever counted them (the
    splitter, or for a cut it did not prove, the batch's parse): a batch's first event's index
    in the file is the sum over the batches before it. Thread-safe."""

    def __init__(self) -> None:
        self._n: dict[int, int] = {}
        self._cond = threading.Condition()
        self._abandoned = False

    def tell(self, index: int, n: int) -> None:
        """Batch ``index`` holds ``n`` events (the first word told stands)."""
        with self._cond:
            self._n.setdefault(index, n)
            self._cond.notify_all()

    def abandon(self) -> None:
        """Nobody will tell the rest (the ingest stopped): :meth:`before` stops waiting."""
        with self._cond:
            self._abandoned = True
            self._cond.notify_all()

    def before(self, index: int) -> int:
        """Events in the batches before ``index``; waits until each was told (they are parsed
        before it, in order, on other threads). Only error messages and notes need it."""
        with self._cond:
            self._cond.wait_for(lambda: self._abandoned or all(i in self._n for i in range(index)))
            return sum(self._n.get(i, 0) for i in range(index))


class UnprovenCut(Exception):
    """A batch cut at a separator without a proof is not a JSON array of objects: the cut
    may not be between events. :class:`~gpuscope.ingest.parse_pool.ParsePool` then splits the
    file again from that batch, proving every cut (:attr:`TraceSplitter.prove_cuts`)."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"the cut at byte {offset} did not prove out")
        self.offset = offset


@dataclass
class Batch:
    """A JSON array (bytes) of whole events, where its first event starts in the file, and its
    index (-1: told by ``counts``, see :meth:`first_event`)."""

    data: bytes
    offset: int
    first_index: int
    strict: bool | None = (
        None  # proven strict JSON already (the fast cut's syntax pass); None: unknown
    )
    #: False: cut at a separator without a proof that it is a JSON array of objects; its
    #: parse proves it (the compiled parser reads only such an array), tells ``counts`` its events,
    #: or raises :class:`UnprovenCut`.
    proven: bool = True
    counts: EventCounts | None = None
    index: int = 0  # the batch's place in its file (for ``counts``)

    def first_event(self) -> int:
        """The index in the file's ``traceEvents`` of the batch's first event."""
        if self.first_index >= 0 or self.counts is None:
            return self.first_index
        return self.counts.before(self.index)

    def tell(self, n: int) -> None:
        """The batch holds ``n`` events (its parse counted them)."""
        if self.counts is not None:
            self.counts.tell(self.index, n)


@dataclass
class TraceSplitter:
    """Iterate :meth:`batches`; afterwards :attr:`metadata` holds every top-level key but ``traceEvents``."""

    path: Path
    chunks: Iterator[bytes]
    batch_bytes: int = BATCH_BYTES
    metadata: dict[str, Any] = field(default_factory=dict)
    json_bytes: int = 0
    n_events: int = 0
    prefix_meta: dict[str, Any] = field(
        default_factory=dict
    )  # top-level keys seen before the events
    #: False: a fast cut (at a separator between events) is handed on unproven when the compiled
    #: parser will read it (its parse is the proof: ~1.2 CPU s/GB less); every batch then has its
    #: events told to :attr:`counts`. True: every cut is proven here.
    prove_cuts: bool = True
    counts: EventCounts = field(default_factory=EventCounts)
    #: Bytes of the events array read by the vectorised scan (a buffer scanned twice counts
    #: twice). The fast cut leaves it the text after the last separator: a file of any layout
    #: whose events it cuts adds at most the end of the array and the events of one batch.
    scanned_bytes: int = 0
    _index: int = 0  # batches made so far

    def _made(self, batch: Batch, n: int | None) -> Batch:
        """``batch`` as the next batch of the file: its index; with :attr:`prove_cuts` off, its
        first event's index comes from :attr:`counts` (told ``n`` now, when known)."""
        batch.index = self._index
        self._index += 1
        if not self.prove_cuts:
            batch.first_index, batch.counts = -1, self.counts
            if n is not None:
                self.counts.tell(batch.index, n)
        return batch

    def _next(self) -> bytes | None:
        chunk = next(self.chunks, None)
        if chunk is not None:
            self.json_bytes += len(chunk)
        return chunk

    def _fail(self, problem: str) -> IngestError:
        return IngestError(self.path, problem)

    # -- phase 1: find the events array --------------------------------------------------------
    def _find_events(self) -> tuple[bytes, Any, int, bool]:
        """-> (text before the key, bytes after the opening '[' (a view of the chunk read: not
        copied), file offset of those bytes, is_object)."""
        buf = b""
        while True:
            chunk = self._next()
            if chunk is None:
                break
            buf += chunk
            first = _NON_WS.search(buf)  # found in place: no copy of the chunk (megabytes)
            if first is None:
                continue
            lead = first.start()
            if buf.startswith(b"\xef\xbb\xbf", lead):
                raise self._fail(
                    "starts with a UTF-8 byte-order mark; not a trace written by PyTorch"
                )
            if buf[lead] == 0x5B:  # '['
                return b"", memoryview(buf)[lead + 1 :], lead + 1, False
            if buf[lead] != 0x7B:  # '{'
                raise self._fail(f"not JSON: starts with {buf[lead : lead + 20]!r}")
            found = _first_key(buf)
            if found is not None:
                return buf[: found[0]], memoryview(buf)[found[1] :], found[1], True
            b = np.frombuffer(buf, np.uint8)
            q = string_quotes(b)
            s, d = brackets(buf, q)
            depth = np.cumsum(d)
            closed = np.flatnonzero(depth == 0)
            end = int(s[closed[0]]) if closed.size else len(buf)
            for m in _KEY.finditer(buf, 0, end):
                k = m.start()
                qi = int(np.searchsorted(q, k))
                if qi >= q.size or q[qi] != k or qi % 2:
                    continue  # inside a string
                si = int(np.searchsorted(s, k))
                if si and depth[si - 1] == 1:
                    return buf[:k], memoryview(buf)[m.end() :], m.end(), True
            if closed.size:
                raise self._fail("not a trace: the JSON object has no traceEvents array")
            if len(buf) > MAX_PREFIX_BYTES:
                raise self._fail(f"no traceEvents array in the first {MAX_PREFIX_BYTES >> 20} MiB")
        if not buf.strip(_WS):
            raise self._fail("empty file")
        raise self._fail("truncated: the file ends before the traceEvents array")

    # -- phase 2: the events ------------------------------------------------------------------
    def batches(self) -> Iterator[Batch]:
        try:
            max_event = max_event_bytes()
        except ValueError as e:
            raise self._fail(f"bad limit setting: {e}") from None
        prefix, view, offset, is_object = self._find_events()
        # a view is read in place by the first batch's join; bytes where nothing joins it
        buf = view if len(view) < self.batch_bytes else bytes(view)
        self.prefix_meta = parse_partial_object(prefix) if is_object else {}
        first = True
        eof = False
        while True:
            parts = [buf]
            if not eof and len(buf) < self.batch_bytes:
                size = len(buf)  # the chunks are joined once: no copy of the buffer per chunk
                while size < self.batch_bytes:
                    chunk = self._next()
                    if chunk is None:
                        eof = True
                        break
                    parts.append(chunk)
                    size += len(chunk)
                if eof:
                    buf = compiled_parser.concat(tuple(parts))
                    continue
            if not eof:
                fast = self._fast_cut(parts, offset, first, max_event)  # the batch: one copy
                if fast is not None:
                    batch, z, n = fast
                    yield self._made(batch, n)
                    self.n_events += n or 0
                    first = False
                    offset += z
                    last = parts[-1]
                    buf = last[z - (sum(len(x) for x in parts) - len(last)) :]  # the rest
                    continue
                if len(parts) > 1:  # cut again as one buffer: the same separator, or the scan
                    buf = compiled_parser.concat(tuple(parts))
                    continue
            self.scanned_bytes += len(buf)
            b = np.frombuffer(buf, np.uint8)
            q = string_quotes(b)
            s, d = brackets(buf, q)
            depth = np.cumsum(d)
            close = np.flatnonzero(depth < 0)
            n = int(close[0]) if close.size else s.size
            starts = np.flatnonzero((d[:n] > 0) & (depth[:n] == 1))
            ends = np.flatnonzero((d[:n] < 0) & (depth[:n] == 0))
            if ends.size:
                sizes = s[ends] - s[starts[: ends.size]] + 1
                big = np.flatnonzero(sizes > max_event)
                if big.size:
                    at = offset + int(s[starts[big[0]]])
                    raise self._fail(
                        f"the event at byte {at} is larger than {max_event:,} bytes "
                        f"({ENV_MAX_EVENT}); not a trace event"
                    )
                a = int(s[starts[0]])
                z = int(s[ends[-1]]) + 1
                gap = buf[:a].strip(_WS)
                if gap != (b"" if first else b","):
                    raise self._fail(
                        f"malformed traceEvents near byte {offset}: expected an event object"
                    )
                if buf[a] != 0x7B:  # '{'
                    raise self._fail(f"traceEvents element at byte {offset + a} is not an object")
                batch = Batch(b"[" + buf[a:z] + b"]", offset + a, self.n_events)
                yield self._made(batch, int(ends.size))
                self.n_events += int(ends.size)
                first = False
                offset += z
                buf = buf[z:]
            if close.size:
                at = int(s[close[0]]) - (len(b) - len(buf))
                gap = buf[:at].strip(_WS)
                if gap not in (b"", b","):
                    raise self._fail(
                        f"malformed traceEvents near byte {offset}: expected an event object"
                    )
                self._finish(prefix, buf[at + 1 :], is_object)
                return
            if eof:
                raise self._fail(
                    f"truncated: the traceEvents array is not closed (file ends at byte {offset + len(buf)})"
                )
            if not ends.size:  # one event larger than the batch: read on, up to the event cap
                if len(buf) > max_event:
                    raise self._fail(
                        f"the event at byte {offset} is larger than {max_event:,} bytes "
                        f"({ENV_MAX_EVENT}); not a trace event"
                    )
                chunk = self._next()
                if chunk is None:
                    eof = True
                else:
                    buf += chunk

    def _fast_cut(
        self, parts: list[Any], offset: int, first: bool, max_event: int
    ) -> tuple[Batch, int, int | None] | None:
        """The batch up to the last separator between events in the text ``parts`` hold
        (bytes-like, in order; the separator in the last one: Kineto's, else that of any layout,
        :func:`_last_cuts`), proven by a strict syntax pass (the compiled parser's
        ``count_objects``, without the GIL; else, or where it refuses, msgspec's, a list of empty
        structs: ~1 CPU s/GB against ~8 for the numpy scan): (batch, bytes of the text used,
        events). Where a separator does not prove out (inside a string or an event), the one
        before it is tried. The batch is the parts' one copy. None when the last part has no
        separator or the first no event's start, or no cut proves out (raw control characters,
        an element that is not an object, an event over the cap): the caller then joins the
        parts (the cut at the same separators, or the numpy scan, which reports what is wrong).
        With :attr:`prove_cuts` off, a batch the compiled parser will read is handed on unproven
        at the last separator (events: None): its parse proves it."""
        last = parts[-1]  # bytes (a chunk, or a joined buffer); the first may be a memoryview
        cuts = _last_cuts(last)
        if not cuts:
            return None
        head = parts[0]
        end = cuts[0] if len(parts) == 1 else len(head)
        m = _NON_WS.search(head, 0, end)  # found in place: no copy of the buffer
        if m is not None and not first:
            if head[m.start()] != 0x2C:  # ','
                return None
            m = _NON_WS.search(head, m.start() + 1, end)
        if m is None or head[m.start()] != 0x7B:  # '{'
            return None
        a = m.start()
        for z_last in cuts:
            if len(parts) == 1:
                if z_last <= a:
                    break
                body = [memoryview(head)[a:z_last]]
            else:
                body = [memoryview(head)[a:], *parts[1:-1], memoryview(last)[:z_last]]
            data = compiled_parser.concat((b"[", *body, b"]"))  # one copy, without the GIL
            z = sum(len(x) for x in parts[:-1]) + z_last
            if not self.prove_cuts and len(data) <= max_event and compiled_parser.enabled():
                return Batch(data, offset + a, -1, strict=True, proven=False), z, None
            n = count_events(data)
            if n is None:
                continue  # not between two events (or the text is not strict JSON)
            if len(data) > max_event:  # an element may be over the cap (a cap below the batch)
                for item in _raw_list().decode(data):
                    if len(memoryview(item)) > max_event:
                        return None
            return Batch(data, offset + a, self.n_events, strict=True), z, n
        return None

    def _finish(self, prefix: bytes, rest: bytes, is_object: bool) -> None:
        parts = [rest]
        size = len(prefix) + len(rest)
        while (chunk := self._next()) is not None:
            size += len(chunk)
            if size > MAX_OUTSIDE_BYTES:
                raise self._fail(
                    f"more than {MAX_OUTSIDE_BYTES >> 20} MiB of JSON after the events"
                )
            parts.append(chunk)
        trailer = b"".join(parts)
        if not is_object:
            if trailer.strip(_WS):
                raise self._fail("extra data after the trace's closing ']'")
            self.metadata = {}
            return
        text = prefix + b'"traceEvents": []' + trailer
        try:
            meta = mend_slash_quotes(text.decode("utf-8", errors="replace"), _loads)
        except json.JSONDecodeError as e:
            problem = "truncated" if e.pos >= len(text.rstrip()) else "malformed JSON"
            raise self._fail(f"{problem} outside the events array ({e.msg})") from None
        meta.pop("traceEvents", None)
        self.metadata = meta


def _last_cuts(last: bytes) -> list[int]:
    """Where a batch may end in ``last``: just after the closing brace of a separator between two
    events, the last first; at most :data:`_SEP_TRIES`. Kineto's separator where ``last`` holds
    one (only the last of them); else the last ones of any layout (:data:`_EVENT_SEP`), looked
    for in the last :data:`_SEP_WINDOW` bytes, then in the whole of ``last``. Each is a candidate
    until a syntax pass (or the batch's parse) proves it."""
    k = last.rfind(_KINETO_SEP)
    if k >= 0:
        return [k + 4]
    found: list[int] = []
    if len(last) > _SEP_WINDOW:
        found = [m.start() + 1 for m in _EVENT_SEP.finditer(last, len(last) - _SEP_WINDOW)]
    if not found:
        found = [m.start() + 1 for m in _EVENT_SEP.finditer(last)]
    return found[: -_SEP_TRIES - 1 : -1]


def count_events(data: bytes) -> int | None:
    """The elements of ``data`` when it is a JSON array of objects (the compiled parser's strict
    check, else msgspec's, for what the former refuses, such as deep nesting); None otherwise."""
    n = compiled_parser.count_objects(data)  # in C, without the GIL
    if n is not None:
        return n
    import msgspec

    try:
        return len(_object_list().decode(data))
    except msgspec.DecodeError:  # malformed, or an element that is not an object
        return None


def _loads(s: str) -> Any:
    return json.loads(s, strict=False)


# Kineto's ChromeTraceLogger::sanitizeStrForJSON (torch 2.11's among others) replaces every
# backslash of a metadata value (``add_metadata_json``) with '/' and writes the value as it is:
# a JSON-escaped quote (\") in it becomes '/"', which ends the string early. The other escapes it
# turns into plain text ('\n' -> '/n') still parse, and are read as written.
_SLASH_QUOTE = '/"'
MAX_SLASH_QUOTE_MENDS = 256  # '/"' read as an escaped quote before a text is called malformed
# characters parsed again while mending (bounds the work on a large malformed text: ~0.5 s)
MEND_BUDGET_CHARS = 64 << 20


def mend_slash_quotes(text: str, parse: Callable[[str], T]) -> T:
    r"""``parse(text)``; where that raises JSONDecodeError, ``parse`` of ``text`` with Kineto's
    ``/"`` read as ``\"``, one at a time: each time the last ``/"`` before where the parse failed
    (the string it ended early is what failed just after it), until ``text`` parses. Valid JSON
    is never changed (a ``/"`` that ends a string, as in ``"/tmp/"``, stays). Raises the first
    error when no mending parses (genuinely malformed JSON) within :data:`MAX_SLASH_QUOTE_MENDS`
    tries and :data:`MEND_BUDGET_CHARS` characters parsed again."""
    try:
        return parse(text)
    except json.JSONDecodeError as e:
        first = err = e
    for _ in range(min(MAX_SLASH_QUOTE_MENDS, MEND_BUDGET_CHARS // max(len(text), 1))):
        k = text.rfind(_SLASH_QUOTE, 0, err.pos)
        if k < 0:
            break
        text = text[:k] + "\\" + text[k + 1 :]
        try:
            return parse(text)
        except json.JSONDecodeError as e:
            err = e
    raise first


_DECODER = json.JSONDecoder(strict=False)


def _skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def _object_head(s: str, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """The key/values of ``s``, the beginning of a JSON object (``{``, then ``"key": value``
    pairs, each followed by ``,`` or the end of ``s``), put in ``out`` as they are read;
    JSONDecodeError where ``s`` is not that."""
    out = {} if out is None else out
    i = _skip_ws(s, 0)
    if i >= len(s) or s[i] != "{":
        raise json.JSONDecodeError("Expecting '{'", s, i)
    i = _skip_ws(s, i + 1)
    while i < len(s):
        if s[i] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", s, i)
        key, i = _DECODER.raw_decode(s, i)
        i = _skip_ws(s, i)
        if i >= len(s) or s[i] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", s, i)
        value, i = _DECODER.raw_decode(s, _skip_ws(s, i + 1))
        out[key] = value
        i = _skip_ws(s, i)
        if i < len(s):
            if s[i] != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", s, i)
            i = _skip_ws(s, i + 1)
    return out


def parse_partial_object(text: bytes) -> dict[str, Any]:
    """Top-level key/values of a JSON object's beginning (the part before traceEvents), Kineto's
    ``/"`` mended (:func:`mend_slash_quotes`); where it is malformed, those before the fault."""
    s = text.decode("utf-8", "replace")
    try:
        return mend_slash_quotes(s, _object_head)
    except json.JSONDecodeError:
        out: dict[str, Any] = {}
        with contextlib.suppress(json.JSONDecodeError):
            _object_head(s, out)
        return out
