"""Read a ``torch.cuda.memory._dump_snapshot`` pickle WITHOUT running code from it.

Depth, memory and work are bounded too. A pickle is a program: the standard loader imports and calls whatever the file names (``os.system``
included), and even a pickle of plain containers can crash or stall the loader (a tuple nested
200,000 deep used as a dict key overflows the C stack when hashed; dict keys chosen to collide make
inserting quadratic; 1 byte of ``}`` builds a 64-byte dict). So :func:`load_plain` first walks the
opcodes without building anything (:func:`check_plain`), mirroring the C unpickler's stack and memo
and refusing, before any object exists:

* every opcode that imports, calls or mutates an object (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST,
  OBJ, NEWOBJ(_EX), EXT*, PERSID, out-of-band buffers): only dicts, lists, tuples, sets, strings,
  bytes, numbers, bools and None can come out, as in a real snapshot;
* nesting deeper than :data:`MAX_DEPTH` as built (a real snapshot nests 6). A list or dict filled
  after the memo shared it can end up deeper, or hold itself; no container is ever hashed (next
  point) and nothing walks the result recursively (:func:`snapshot_summary` loops), so that is
  harmless;
* dict keys and set items other than strings, bytes, 32-bit ints, bools and None (the only hashes
  a file cannot make collide, and never a nested tuple);
* a length, frame or memo index beyond what the file holds, an opcode running past the end of its
  frame (the C unpickler reading a file then drops the rest of the frame, and would build
  something other than what was checked), and an estimated memory more than
  :data:`MAX_MEMORY_RATIO` times the file's size (a real snapshot: 7-8).

Only then does :class:`PlainUnpickler` (the C unpickler, every global and persistent id refused a
second time) build it. The walk is linear in the file's size, and so is the load it admits.

:func:`snapshot_summary` turns the snapshot into the few figures gpuscope keeps (in the rank's
metadata, key ``gpuscope.memory_snapshot``; docs/metrics.md, "Memory snapshot"), visiting at most
one list entry per byte of the file: shared references that would make it visit more are refused.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
from pathlib import Path
from typing import Any

from gpuscope.ingest.errors import IngestError

MAX_SNAPSHOT_BYTES = 1 << 30  # a snapshot larger than 1 GiB is refused (read whole into memory)
MAX_DEPTH = 100  # containers nested deeper than this are refused (a real snapshot: 6)
MAX_MEMORY_RATIO = 16  # estimated bytes of objects per byte of pickle (a real snapshot: 7-8)
MEMORY_SLACK = 64 << 20  # bytes of objects any file may build besides the ratio
MAX_STACK = 1 << 20  # values on the unpickler's stack (a real snapshot: a few thousand)
MAX_DEVICES = 256  # distinct devices a summary may hold
MAX_ACTIONS = 64  # distinct allocator actions a summary may hold (torch records about 10)
MAX_ACTION_CHARS = 64  # an action name longer than this is refused
META_KEY = "gpuscope.memory_snapshot"
SNAPSHOT_SUFFIXES = (".pickle", ".pkl")


class RefusedPickle(pickle.UnpicklingError):
    """The pickle asked for something other than plain containers and scalars, or for more depth,
    memory or work than a memory snapshot needs. ``str(err)`` says what, in one line."""


class OverLimit(RefusedPickle):
    """The pickle needs more depth, memory or work than a memory snapshot does."""


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds only the pickle's own containers and scalars: every global (class,
    function) and every persistent id is refused, so REDUCE/BUILD/INST/OBJ have nothing to call.
    Use it through :func:`load_plain`, which checks the opcodes first."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(f"it asks for {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("it asks for a persistent object")


def load_plain(data: bytes) -> Any:
    """Unpickle ``data`` admitting containers and scalars only, within :func:`check_plain`'s
    bounds; raises RefusedPickle otherwise (and pickle.UnpicklingError / EOFError / ValueError for
    a damaged file). Time and memory are linear in ``len(data)``."""
    at_global = check_plain(data)
    obj = PlainUnpickler(io.BytesIO(data)).load()
    if at_global is not None:  # find_class raised above; this line is a second lock
        raise RefusedPickle(f"it asks for a global at byte {at_global}")
    return obj


# Each value on the checker's stack is one int: depth << 3 | kind. A key scalar is exactly 0.
_KEY = 0  # str, bytes, an int of at most 32 bits, bool, None: hashable, hashes no one can collide
_SCALAR = 1  # float, any int, bytearray: a value, never a key
_TUPLE, _FROZENSET, _LIST, _DICT, _SET = 2, 3, 4, 5, 6
_BASE = {_TUPLE: 40, _FROZENSET: 216, _LIST: 56, _DICT: 64, _SET: 216}  # bytes of an empty one
_REFUSED = {
    ord("R"): "REDUCE", ord("b"): "BUILD", ord("i"): "INST", ord("o"): "OBJ",
    0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4",
    0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}  # fmt: skip
_EMPTY_DICT = 1 << 3 | _DICT
_I4 = struct.Struct("<i").unpack_from
_U4 = struct.Struct("<I").unpack_from
_U8 = struct.Struct("<Q").unpack_from


class _Damaged(pickle.UnpicklingError):
    """Not a well-formed pickle: truncated, a length past the end, a stack underflow, …"""


def check_plain(data: bytes) -> int | None:
    """Walk ``data``'s opcodes as the C unpickler would, building nothing, and raise
    :class:`RefusedPickle` (or pickle.UnpicklingError for a damaged file) for anything
    :func:`load_plain` must not build (module docstring). Returns None, or the byte offset of the
    first GLOBAL / STACK_GLOBAL, where the walk stops: :class:`PlainUnpickler` gets that far and
    refuses it by name. Linear time in ``len(data)``; memory: a few bytes per stack and memo slot.
    """
    n = len(data)
    if n == 0:
        raise _Damaged("the file is empty")
    stack: list[int] = []
    marks: list[int] = []
    fence = 0  # stack[:fence] is below the innermost MARK: no opcode may pop it
    end = n  # where the current frame ends (n: outside frames); no opcode crosses it
    memo: list[int | None] = []
    memo_len = 0  # memo slots written (the C unpickler's memo_len, where MEMOIZE writes)
    mem = 0  # estimated bytes of the objects built
    pos = 0
    check_at = 0
    push = stack.append

    def damaged(what: str) -> _Damaged:
        return _Damaged(f"{what} at byte {at}")

    def need(k: int) -> None:
        if k < 0 or pos + k > end:
            where = f"the {n}-byte file" if end == n else f"its frame (byte {end})"
            raise damaged(f"a length of {k} bytes, past the end of {where}")

    def line() -> bytes:
        eol = data.find(b"\n", pos, end)
        if eol < 0:
            raise damaged("a line without its end")
        return data[pos:eol]

    def pop_mark() -> list[int]:  # the items above the innermost MARK, which is dropped
        nonlocal fence
        if not marks:
            raise damaged("no MARK to pop")
        i = marks.pop()
        fence = marks[-1] if marks else 0
        items = stack[i:]
        del stack[i:]
        return items

    def contained(kind: int, items: list[int]) -> int:
        d = (max(items) >> 3) + 1 if items else 1
        if d > MAX_DEPTH:
            raise OverLimit(
                f"containers nested more than {MAX_DEPTH} deep at byte {at}"
                " (a memory snapshot nests 6)"
            )
        return d << 3 | kind

    def keys_only(items: list[int], what: str) -> None:
        if any(items):
            raise RefusedPickle(
                f"a {what} that is not a string, bytes, a 32-bit int, a bool or None at byte {at}"
            )

    def memo_put(idx: int) -> None:
        nonlocal memo_len
        if len(stack) <= fence:
            raise damaged("nothing to memoize")
        if idx > 2 * memo_len + 1024:  # a pickler numbers its memo 0, 1, 2, ...
            raise OverLimit(f"memo index {idx} far beyond the {memo_len} used, at byte {at}")
        if idx >= len(memo):
            memo.extend([None] * (idx + 1 - len(memo)))
        if memo[idx] is None:
            memo_len += 1
        memo[idx] = stack[-1]

    def memo_get(idx: int) -> None:
        c = memo[idx] if idx < len(memo) else None
        if c is None:
            raise damaged(f"memo {idx} read before it was written")
        push(c)

    def into(kind: int, items: list[int], start: int) -> None:
        # append/set/add items to the container at stack[start - 1] (the C unpickler's do_append,
        # do_setitems, load_additems): it must be a container of that kind
        nonlocal mem
        if start <= fence:
            raise damaged("nothing to add to")
        if not items:
            return
        target = stack[start - 1]
        if target & 7 != kind:
            raise RefusedPickle(f"items added to something not a {_NAMES[kind]} at byte {at}")
        if kind == _DICT:
            if len(items) % 2:
                raise damaged("an odd number of items for a dict")
            keys_only(items[0::2], "dict key")
            mem += 20 * len(items)  # 40 bytes per pair
        elif kind == _SET:
            keys_only(items, "set item")
            mem += 32 * len(items)
        else:
            mem += 9 * len(items)
        d = contained(kind, items)
        if d > target:
            stack[start - 1] = d

    while True:
        if pos >= end:
            if end < n:  # the frame is read whole; the next one may start
                end = n
            if pos >= n:
                raise _Damaged("the file ends before its STOP opcode")
        if pos >= check_at:  # every 64 KiB: the stack (ours and the C unpickler's) is bounded
            if len(stack) > MAX_STACK:
                raise OverLimit(f"more than {MAX_STACK} values on the stack at byte {pos}")
            check_at = pos + 65536
        at = pos
        op = data[pos]
        pos += 1
        # the most frequent opcodes of a real snapshot first, inlined
        if op == 0x6A:  # LONG_BINGET
            if pos + 4 > end:
                need(4)
            idx = _U4(data, pos)[0]
            pos += 4
            try:
                c = memo[idx]
            except IndexError:
                c = None
            if c is None:
                raise damaged(f"memo {idx} read before it was written")
            push(c)
        elif op == 0x94:  # MEMOIZE
            if memo_len == len(memo) and len(stack) > fence:
                memo.append(stack[-1])
                memo_len += 1
            else:
                memo_put(memo_len)
        elif op == 0x28:  # MARK
            if len(marks) > MAX_DEPTH:  # each open MARK is a container being filled
                raise OverLimit(f"more than {MAX_DEPTH} MARKs open at byte {at}")
            fence = len(stack)
            marks.append(fence)
        elif op == 0x68:  # BINGET
            if pos >= end:
                need(1)
            idx = data[pos]
            pos += 1
            try:
                c = memo[idx]
            except IndexError:
                c = None
            if c is None:
                raise damaged(f"memo {idx} read before it was written")
            push(c)
        elif op == 0x7D:  # EMPTY_DICT
            mem += 64
            push(_EMPTY_DICT)
        elif op == 0x75:  # SETITEMS
            if not marks:
                raise damaged("no MARK to pop")
            i = marks.pop()
            fence = marks[-1] if marks else 0
            items = stack[i:]
            del stack[i:]
            if i <= fence:
                raise damaged("nothing to add to")
            if items:  # the fast path of into(_DICT, items, i)
                target = stack[i - 1]
                if target & 7 != _DICT or len(items) & 1 or any(items[0::2]):
                    into(_DICT, items, i)  # raises, saying which
                d = ((max(items[1::2]) | 7) + 1) | _DICT  # one deeper than its deepest value
                if d >> 3 > MAX_DEPTH:
                    into(_DICT, items, i)  # raises
                mem += 20 * len(items)
                if d > target:
                    stack[i - 1] = d
        elif op == 0x4B:  # BININT1
            if pos >= end:
                need(1)
            pos += 1
            push(_KEY)
        elif op == 0x8A:  # LONG1
            if pos >= end:
                need(1)
            k = data[pos]
            pos += 1 + k
            if pos > end:
                need(k)
            mem += 32 + k
            push(_SCALAR)
        elif op == 0x8C or op == 0x43 or op == 0x55:  # SHORT_BINUNICODE, SHORT_BINBYTES/STRING
            if pos >= end:
                need(1)
            k = data[pos]
            pos += 1 + k
            if pos > end:
                need(k)
            mem += 56 + 4 * k
            push(_KEY)
        elif op == 0x4D:  # BININT2
            need(2)
            pos += 2
            mem += 32
            push(_KEY)
        elif op == 0x4A:  # BININT
            need(4)
            pos += 4
            mem += 32
            push(_KEY)
        elif op == 0x5D or op == 0x29 or op == 0x8F:  # EMPTY_LIST/TUPLE/SET
            kind = _LIST if op == 0x5D else _TUPLE if op == 0x29 else _SET
            mem += _BASE[kind]
            push(1 << 3 | kind)
        elif op == 0x65:  # APPENDS
            items = pop_mark()
            into(_LIST, items, len(stack))
        elif op == 0x90:  # ADDITEMS
            items = pop_mark()
            into(_SET, items, len(stack))
        elif op == 0x73 or op == 0x61:  # SETITEM, APPEND
            k = 2 if op == 0x73 else 1
            if len(stack) - k <= fence:
                raise damaged("stack underflow")
            items = stack[-k:]
            del stack[-k:]
            into(_DICT if k == 2 else _LIST, items, len(stack))
        elif op == 0x4E or op == 0x88 or op == 0x89:  # NONE, NEWTRUE, NEWFALSE
            push(_KEY)
        elif op == 0x85 or op == 0x86 or op == 0x87:  # TUPLE1/2/3
            k = op - 0x84
            if len(stack) - k < fence:
                raise damaged("stack underflow")
            items = stack[-k:]
            del stack[-k:]
            mem += 40 + 8 * k
            push(contained(_TUPLE, items))
        elif op == 0x74 or op == 0x6C or op == 0x64 or op == 0x91:  # TUPLE, LIST, DICT, FROZENSET
            items = pop_mark()
            if op == 0x74:
                kind = _TUPLE
            elif op == 0x6C:
                kind = _LIST
            elif op == 0x64:
                kind = _DICT
                if len(items) % 2:
                    raise damaged("an odd number of items for a dict")
                keys_only(items[0::2], "dict key")
            else:
                kind = _FROZENSET
                keys_only(items, "set item")
            mem += _BASE[kind] + 20 * len(items)
            push(contained(kind, items))
        elif op == 0x58 or op == 0x42 or op == 0x8D or op == 0x8E or op == 0x54 or op == 0x96:
            # BINUNICODE, BINBYTES (4-byte unsigned length), BINUNICODE8, BINBYTES8, BYTEARRAY8
            # (8-byte), BINSTRING (4-byte signed)
            if op == 0x58 or op == 0x42:
                need(4)
                k = _U4(data, pos)[0]
                pos += 4
            elif op == 0x54:
                need(4)
                k = _I4(data, pos)[0]
                pos += 4
            else:
                need(8)
                k = _U8(data, pos)[0]
                pos += 8
            need(k)
            pos += k
            mem += 64 + 4 * k
            push(_SCALAR if op == 0x96 else _KEY)
        elif op == 0x47:  # BINFLOAT
            need(8)
            pos += 8
            mem += 24
            push(_SCALAR)
        elif op == 0x8B:  # LONG4
            need(4)
            k = _I4(data, pos)[0]
            if k < 0:
                raise damaged("a negative length")
            need(4 + k)
            pos += 4 + k
            mem += 32 + k
            push(_SCALAR)
        elif op == 0x71:  # BINPUT
            need(1)
            memo_put(data[pos])
            pos += 1
        elif op == 0x72:  # LONG_BINPUT
            need(4)
            memo_put(_U4(data, pos)[0])
            pos += 4
        elif op == 0x67 or op == 0x70:  # GET, PUT (decimal text)
            text = line()
            if not text.isdigit() or len(text) > 12:
                raise damaged("a memo index that is not a plain number")
            pos += len(text) + 1
            if op == 0x67:
                memo_get(int(text))
            else:
                memo_put(int(text))
        elif op in (0x49, 0x4C, 0x46, 0x53, 0x56):  # INT, LONG, FLOAT, STRING, UNICODE (text)
            text = line()
            pos += len(text) + 1
            mem += 64 + 4 * len(text)
            push(_KEY if op == 0x53 or op == 0x56 else _SCALAR)
        elif op == 0x32:  # DUP
            if len(stack) <= fence:
                raise damaged("stack underflow")
            push(stack[-1])
        elif op == 0x30:  # POP: the innermost MARK if nothing is above it, else the top item
            if marks and marks[-1] == len(stack):
                marks.pop()
                fence = marks[-1] if marks else 0
            elif len(stack) <= fence:
                raise damaged("stack underflow")
            else:
                stack.pop()
        elif op == 0x31:  # POP_MARK
            pop_mark()
        elif op == 0x95:  # FRAME: the next k bytes are one frame, holding whole opcodes
            if end < n:
                raise damaged("a frame inside a frame")
            need(8)
            k = _U8(data, pos)[0]
            pos += 8
            need(k)
            end = pos + k
        elif op == 0x80:  # PROTO
            need(1)
            if data[pos] > pickle.HIGHEST_PROTOCOL:
                raise damaged(f"unsupported pickle protocol {data[pos]}")
            pos += 1
        elif op == 0x2E:  # STOP
            if len(stack) <= fence:
                raise damaged("nothing to return")
            break
        elif op == 0x63 or op == 0x93:  # GLOBAL, STACK_GLOBAL: PlainUnpickler names and refuses it
            return at
        elif op == 0x50 or op == 0x51:  # PERSID, BINPERSID
            raise RefusedPickle("it asks for a persistent object")
        elif op in _REFUSED:
            raise RefusedPickle(f"it uses {_REFUSED[op]} at byte {at}")
        else:
            raise damaged(f"unknown opcode 0x{op:02x}")
    if mem > MAX_MEMORY_RATIO * n + MEMORY_SLACK:
        raise OverLimit(
            f"it would build about {mem >> 20} MiB of objects from {n} bytes, more than"
            f" {MAX_MEMORY_RATIO} times its size (a memory snapshot: 7-8)"
        )
    return None


_NAMES = {_DICT: "dict", _LIST: "list", _SET: "set"}


def read_snapshot(path: Path | str, data: bytes | None = None) -> dict[str, Any]:
    """The summary of a memory snapshot file (``data``: its bytes, when already read, e.g. an
    upload). Raises IngestError, one line naming the file, for anything that is not a plain
    snapshot."""
    p = Path(path)
    if data is None:
        try:
            size = p.stat().st_size
        except OSError as e:
            raise IngestError(p, f"cannot read the memory snapshot: {e.strerror or e}") from None
        if size > MAX_SNAPSHOT_BYTES:
            raise IngestError(
                p, f"memory snapshot of {size} bytes: more than the 1 GiB gpuscope reads"
            )
        data = p.read_bytes()
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise IngestError(p, "memory snapshot larger than the 1 GiB gpuscope reads")
    try:
        obj = load_plain(data)
    except OverLimit as e:
        raise IngestError(p, f"refused: {e}") from None
    except _Damaged as e:
        raise IngestError(p, f"not a memory snapshot pickle: {e}") from None
    except RefusedPickle as e:
        raise IngestError(
            p,
            f"refused: not a plain memory snapshot ({e}); only containers, numbers and strings are read",
        ) from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        OverflowError,
        MemoryError,
    ) as e:  # a damaged file that check_plain let through (a bad number or text, an unhashable key)
        raise IngestError(
            p, f"not a memory snapshot pickle: {type(e).__name__}: {str(e)[:80]}"
        ) from None
    return snapshot_summary(p, obj, max_visits=len(data) + 64)


def snapshot_summary(path: Path | str, snap: Any, max_visits: int | None = None) -> dict[str, Any]:
    """Segments, reserved / allocated / active bytes, the largest free block and how the allocator's
    recorded actions split, per device (``torch.cuda.memory._snapshot()``'s layout: ``segments``, each
    with ``device``, ``total_size``, ``allocated_size``, ``active_size``, ``blocks`` of ``size`` and
    ``state``; ``device_traces``, one list of actions per device).

    ``max_visits``: the most list entries (segments, blocks, traces, actions) it may visit; one per
    byte of the file is what a snapshot without shared references needs, so the same list reached
    many times (``{"segments": [S] * n}``, n² blocks) is refused (IngestError) instead of walked.
    Sizes outside 0..2**63 and non-finite floats count 0, as non-numbers do."""
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise IngestError(
            path, "not a memory snapshot: no 'segments' list (torch.cuda.memory._dump_snapshot)"
        )
    budget = math.inf if max_visits is None else max_visits
    visits = 0

    def visit(items: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
        nonlocal visits
        visits += len(items)
        if visits > budget:
            raise IngestError(
                path,
                f"refused: its summary would visit more than {max_visits} entries, one per byte "
                "of the file (the same segments or blocks listed over and over, not a real snapshot)",
            )
        return items

    devices: dict[int, dict[str, Any]] = {}
    for seg in visit(snap["segments"]):
        if not isinstance(seg, dict):
            continue
        dev = _n(seg.get("device"))
        if dev not in devices and len(devices) >= MAX_DEVICES:
            raise IngestError(path, f"refused: segments of more than {MAX_DEVICES} devices")
        d = devices.setdefault(dev, {
            "segments": 0, "reserved_bytes": 0, "allocated_bytes": 0, "active_bytes": 0,
            "largest_free_block_bytes": 0, "free_blocks": 0,
        })  # fmt: skip
        d["segments"] += 1
        d["reserved_bytes"] += _n(seg.get("total_size"))
        d["allocated_bytes"] += _n(seg.get("allocated_size"))
        d["active_bytes"] += _n(seg.get("active_size"))
        blocks = seg.get("blocks")
        for blk in visit(blocks) if isinstance(blocks, list | tuple) else ():
            if isinstance(blk, dict) and blk.get("state") == "inactive":
                d["free_blocks"] += 1
                d["largest_free_block_bytes"] = max(
                    d["largest_free_block_bytes"], _n(blk.get("size"))
                )
    actions: dict[str, int] = {}
    traces = snap.get("device_traces")
    for tr in visit(traces) if isinstance(traces, list) else ():
        for a in visit(tr) if isinstance(tr, list) else ():
            name = a.get("action") if isinstance(a, dict) else None
            if not isinstance(name, str):
                continue
            if name not in actions:
                if len(name) > MAX_ACTION_CHARS or len(actions) >= MAX_ACTIONS:
                    raise IngestError(
                        path,
                        f"refused: more than {MAX_ACTIONS} kinds of allocator action, or one"
                        f" named in more than {MAX_ACTION_CHARS} characters",
                    )
                actions[name] = 0
            actions[name] += 1
    return {
        "file": Path(path).name,
        "devices": {str(k): v for k, v in sorted(devices.items())},
        "actions": dict(sorted(actions.items())),
    }


def _n(v: Any) -> int:
    """``v`` as a byte count or device number: an int or finite float within 0..2**63 (sign
    kept), else 0."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return 0
    if isinstance(v, float) and not math.isfinite(v):
        return 0
    return int(v) if -(1 << 63) <= v < (1 << 63) else 0
