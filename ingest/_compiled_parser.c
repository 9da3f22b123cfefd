/*
 * gpuscope.ingest._compiled_parser: one batch of Kineto trace events (a JSON array of whole
 * event objects, as gpuscope.ingest.json_stream cuts it) parsed in one pass into the column
 * buffers of the "parsed" layout (gpuscope.ingest.batch_insert.TO_PARSED), without the GIL.
 *
 * It is a fast path, not a second reader: whatever it is not certain to read exactly as DuckDB's
 * JSON reader does (duplicate keys it keeps, escaped keys, numbers of a type it would cast, a
 * JSON value it would re-render, invalid UTF-8, deep nesting, anything that is not strict JSON),
 * it refuses the whole batch (scan() returns None) and the caller reads that batch the old way.
 * tests/test_compiled_parser.py compares both readers, table for table.
 *
 * Every read is bounds-checked against the end of the input; no input makes it read past it.
 *
 * Where a byte's cost goes (docs/benchmarks.md, issue 45): a Kineto event is ~330 bytes of ~20
 * short strings, ~12 numbers and ~80 places whitespace may stand (a third hold some), so the
 * cost is per token, mostly branches on the bytes: a string whose quote is among its first 16
 * bytes is classified and copied as one block (SSE2), numbers' digits are read in one pass, keys
 * told apart by their length, whitespace skipped once per gap (SSE2 there measured slower: its
 * latency lies on the chain of positions). The columns are written into buffers of the thread's
 * own, kept from one batch to the next (their pages are not faulted in again), then copied once
 * into one block the size of the batch's columns (mapped populated: the kernel fills its pages in
 * one call), which Python owns; a column without a null hands over no validity bitmap, one
 * without a value a run of zeros at the block's end.
 */
#define _GNU_SOURCE /* strtod_l, MAP_POPULATE */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* x86-64's baseline: 16 bytes at a time in string() */
#endif

/* ------------------------------------------------------------------------------------------ */
/* Growable byte buffers                                                                       */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t need) {
    if (need <= b->cap - b->len) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < need) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    uint8_t *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (n > b->cap - b->len && buf_reserve(b, n)) return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

/* buf_put of up to 64 bytes as 16-byte copies, where the input holds the whole 16-byte blocks
   (``src_end``: the input's end) and the buffer has room for them; the bytes copied past ``n``
   lie beyond the buffer's length (written over by the next value, never handed over). */
static inline int buf_put_fast(Buf *b, const uint8_t *src, size_t n, const uint8_t *src_end) {
    size_t whole = (n + 15) & ~(size_t)15;
    if (n <= 64 && (size_t)(src_end - src) >= whole && b->cap - b->len >= whole) {
        uint8_t *dst = b->p + b->len;
        for (size_t i = 0; i < whole; i += 16) memcpy(dst + i, src + i, 16);
        b->len += n;
        return 0;
    }
    return buf_put(b, src, n);
}

static inline int buf_byte(Buf *b, uint8_t c) {
    if (b->len == b->cap && buf_reserve(b, 1)) return -1;
    b->p[b->len++] = c;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The output columns, in the order the Python side (gpuscope.ingest.compiled_parser) reads    */

enum Kind { K_STR, K_I64, K_I32, K_F64, K_LIST };

enum Col {
    C_PH, C_CAT, C_TS_NS, C_DUR_NS, C_CORRELATION, C_EXTERNAL_ID, C_DEVICE, C_STREAM, C_FLOW_ID,
    C_GRID, C_BLOCK, C_REGISTERS, C_SHARED_MEM, C_BYTES, C_INPUT_DIMS, C_INPUT_TYPES,
    C_CONCRETE_INPUTS, C_FLOPS, C_SEQ_NUM, C_FWD_TID, C_PYTHON_ID, C_PYTHON_PARENT_ID, C_NAME,
    C_PID_NUM, C_PID_LABEL, C_TID_NUM, C_TID_LABEL, C_META_NAME, N_COLS
};

static const enum Kind KIND[N_COLS] = {
    K_STR, K_STR, K_I64, K_I64, K_I64, K_I64, K_I32, K_I64, K_I64,
    K_LIST, K_LIST, K_I32, K_I64, K_I64, K_STR, K_STR,
    K_STR, K_F64, K_I64, K_I64, K_I64, K_I64, K_STR,
    K_I64, K_STR, K_I64, K_STR, K_STR,
};

/* The variable-width columns (int32 offsets), and the shift from their data's bytes to items. */
static const int VAR_COL[] = {
    C_PH, C_CAT, C_GRID, C_BLOCK, C_INPUT_DIMS, C_INPUT_TYPES, C_CONCRETE_INPUTS, C_NAME,
    C_PID_LABEL, C_TID_LABEL, C_META_NAME,
};
#define N_VAR ((int)(sizeof VAR_COL / sizeof VAR_COL[0]))
static const int VAR_SHIFT[N_VAR] = {0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0};

typedef struct {
    Buf valid;      /* validity bitmap, a bit per row */
    Buf values;     /* fixed-width values; string/list: int32 offsets (n + 1) */
    Buf data;       /* string bytes; list: the int32 items */
    int64_t count;  /* rows with a value */
} Column;

/* A thread's column buffers, kept from one batch to the next (scratch_of). */
typedef struct {
    Column col[N_COLS];
    Buf tmp;  /* an id's text when no label column keeps it */
} Scratch;

typedef struct {
    const uint8_t *s, *end;
    Column *col;
    Buf *tmp;
    int64_t n;
    int64_t cap_rows;  /* rows the bitmaps and fixed-width values have room for, zeroed */
    uint32_t set;      /* the columns this row has a value in, a bit each */
    int mark;          /* a string "[memory]" was read (see string()) */
    locale_t c_locale;
    int oom;
} Ctx;

static inline size_t width(int i) {
    return KIND[i] == K_I32 ? 4 : (KIND[i] == K_I64 || KIND[i] == K_F64) ? 8 : 0;
}

/* Bytes of column i's value buffer for ``rows`` rows. */
static inline size_t values_bytes(int i, int64_t rows) {
    size_t w = width(i);
    return w ? (size_t)rows * w : ((size_t)rows + 1) * 4;
}

/* Room for ``rows`` rows in every bitmap and value buffer, the new part zeroed: a row's values
   and bits are then written only where it has a value (checked once per row count, not per
   value). The buffers' ``len`` is the part zeroed so far. */
static int reserve_rows(Ctx *x, int64_t rows) {
    for (int i = 0; i < N_COLS; i++) {
        Column *c = &x->col[i];
        size_t bytes = (size_t)(rows + 7) / 8;
        if (bytes > c->valid.len) {
            if (buf_reserve(&c->valid, bytes - c->valid.len)) return -1;
            memset(c->valid.p + c->valid.len, 0, bytes - c->valid.len);
            c->valid.len = bytes;
        }
        size_t vb = values_bytes(i, rows);
        if (vb > c->values.len) {
            if (buf_reserve(&c->values, vb - c->values.len)) return -1;
            memset(c->values.p + c->values.len, 0, vb - c->values.len);
            c->values.len = vb;
        }
    }
    x->cap_rows = rows;
    return 0;
}

/* A new row. */
static inline int row_start(Ctx *x) {
    if (x->n >= x->cap_rows && reserve_rows(x, x->cap_rows ? 2 * x->cap_rows : 1024)) return -1;
    x->set = 0;
    return 0;
}

/* The row's end: its validity bits, the offsets of variable-width columns; ph and cat are never
   null ('' for none). */
static inline int row_end(Ctx *x) {
    int64_t n = x->n;
    uint32_t m = x->set | (1u << C_PH) | (1u << C_CAT);
    uint8_t bit = (uint8_t)(1u << (n & 7));
    size_t byte = (size_t)(n >> 3);
    while (m) {
        int i = __builtin_ctz(m);
        m &= m - 1;
        x->col[i].valid.p[byte] |= bit;
        x->col[i].count++;
    }
    for (int k = 0; k < N_VAR; k++) {
        Column *c = &x->col[VAR_COL[k]];
        size_t end = c->data.len >> VAR_SHIFT[k];
        if (end > INT32_MAX) return -1;
        int32_t off = (int32_t)end;
        memcpy(c->values.p + (size_t)(n + 1) * 4, &off, 4);
    }
    x->n = n + 1;
    return 0;
}

static inline void put_i64(Ctx *x, int col, int64_t v) {
    memcpy(x->col[col].values.p + (size_t)x->n * 8, &v, 8);
    x->set |= 1u << col;
}

static inline void put_i32(Ctx *x, int col, int32_t v) {
    memcpy(x->col[col].values.p + (size_t)x->n * 4, &v, 4);
    x->set |= 1u << col;
}

static inline void put_f64(Ctx *x, int col, double v) {
    memcpy(x->col[col].values.p + (size_t)x->n * 8, &v, 8);
    x->set |= 1u << col;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON pieces. Each returns 0, or -1 to refuse the batch (x->oom says when memory ran out).   */

#define REFUSE (-1)

/* JSON's whitespace; bytes that may stand in a string as they are (printable ASCII but the quote
   and backslash). */
static uint8_t WS[256], PLAIN[256];

static void init_tables(void) {
    for (int i = 0; i < 256; i++) {
        PLAIN[i] = (i >= 0x20 && i < 0x80 && i != '"' && i != '\\');
        WS[i] = (i == ' ' || i == '\n' || i == '\r' || i == '\t');
    }
}

static inline void ws(Ctx *x) {
    const uint8_t *s = x->s, *e = x->end;
    while (s < e && WS[*s]) s++;
    x->s = s;
}

/* The byte ``ch`` at x->s (no whitespace before it), consumed. */
static inline int at(Ctx *x, uint8_t ch) {
    if (x->s >= x->end || *x->s != ch) return REFUSE;
    x->s++;
    return 0;
}

static inline int expect(Ctx *x, uint8_t ch) {
    ws(x);
    return at(x, ch);
}

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlong forms, no surrogates, at most
   U+10FFFF), or 0 when it is not one. */
static int utf8_len(const uint8_t *s, const uint8_t *e) {
    uint8_t a = s[0];
    if (a >= 0xC2 && a <= 0xDF) {
        if (e - s < 2 || (s[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (a >= 0xE0 && a <= 0xEF) {
        if (e - s < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (a == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
        if (a == 0xED && s[1] > 0x9F) return 0;  /* surrogate */
        return 3;
    }
    if (a >= 0xF0 && a <= 0xF4) {
        if (e - s < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (a == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
        if (a == 0xF4 && s[1] > 0x8F) return 0;  /* beyond U+10FFFF */
        return 4;
    }
    return 0;
}

static int hex4(const uint8_t *s, const uint8_t *e, uint32_t *out) {
    if (e - s < 4) return REFUSE;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return REFUSE;
    }
    *out = v;
    return 0;
}

static int put_utf8(Buf *b, uint32_t cp) {
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (uint8_t)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (uint8_t)(0xC0 | (cp >> 6)); u[1] = (uint8_t)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xE0 | (cp >> 12)); u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (uint8_t)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (uint8_t)(0xF0 | (cp >> 18)); u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (uint8_t)(0x80 | (cp & 0x3F)); n = 4;
    }
    return buf_put(b, u, n);
}

/* A string; x->s is just past its opening quote. Its text, unescaped, is appended to ``out``
   (NULL: only checked). ``raw``: no escapes allowed (keys, and strings of kept JSON).

   It also looks for batch_insert.MEMORY_MARK, the ten bytes "[memory]" with their quotes, which
   the caller would otherwise look for in the whole text: in strict JSON (any batch read) a quote
   byte opens a string, closes one (then a comma, colon, bracket, brace or whitespace follows, not
   '[') or is escaped inside one (then the quote after "[memory" closes that string). So the text
   holds the mark exactly when some string's raw text is "[memory]" or ends with a quote and
   "[memory]"; every string of the batch (keys, values, skipped ones) passes here. */
static int string(Ctx *x, Buf *out, int raw) {
    const uint8_t *s = x->s, *e = x->end, *run = s, *open = s;
    for (;;) {
#if defined(__SSE2__)
        /* sixteen bytes at a time: stop at the first quote, backslash, control or non-ASCII byte
           (as a signed byte, one below 0x20 is a control or has its high bit set); the last
           fifteen a byte at a time */
        {
            const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\');
            const __m128i space = _mm_set1_epi8(0x20);
            for (;;) {
                if (e - s < 16) {
                    while (s < e && PLAIN[*s]) s++;
                    break;
                }
                __m128i v = _mm_loadu_si128((const __m128i *)s);
                __m128i hit = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                    _mm_cmplt_epi8(v, space));
                int mask = _mm_movemask_epi8(hit);
                if (mask) { s += __builtin_ctz((unsigned)mask); break; }
                s += 16;
            }
        }
#else
        /* eight bytes at a time while none is a quote, a backslash, a control or non-ASCII */
        while (e - s >= 8) {
            uint64_t v;
            memcpy(&v, s, 8);
            const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
            uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
            uint64_t special = ((q - ones) & ~q) | ((b - ones) & ~b) | (v - ones * 0x20) | v;
            if (special & high) break;
            s += 8;
        }
        while (s < e && PLAIN[*s]) s++;
#endif
        if (s >= e) return REFUSE;
        uint8_t ch = *s;
        if (ch == '"') {
            if (s - open >= 8 && memcmp(s - 8, "[memory]", 8) == 0 && (s - open == 8 || s[-9] == '"'))
                x->mark = 1;
            if (out && buf_put_fast(out, run, (size_t)(s - run), e)) { x->oom = 1; return REFUSE; }
            x->s = s + 1;
            return 0;
        }
        if (ch >= 0x80) {
            int n = utf8_len(s, e);
            if (!n) return REFUSE;
            s += n;
            continue;
        }
        if (ch != '\\' || raw) return REFUSE;  /* a raw control character, or an escape */
        if (out && buf_put(out, run, (size_t)(s - run))) { x->oom = 1; return REFUSE; }
        if (e - s < 2) return REFUSE;
        uint8_t esc = s[1];
        uint32_t cp;
        s += 2;
        switch (esc) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (hex4(s, e, &cp)) return REFUSE;
                s += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return REFUSE;  /* a low surrogate alone */
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (e - s < 6 || s[0] != '\\' || s[1] != 'u' || hex4(s + 2, e, &lo)) return REFUSE;
                    if (lo < 0xDC00 || lo > 0xDFFF) return REFUSE;
                    s += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                break;
            default:
                return REFUSE;
        }
        if (out && put_utf8(out, cp)) { x->oom = 1; return REFUSE; }
        run = s;
    }
}

/* string() for the common string: its closing quote among the next sixteen bytes, and no byte
   before it that needs a look (an escape, a control, non-ASCII). Those sixteen bytes are
   classified and, for ``out``, copied at once; any other string goes to string(). The memory
   mark: such a string holds no quote, so it is the mark only as the whole text "[memory]". */
static inline int string_fast(Ctx *x, Buf *out, int raw) {
#if defined(__SSE2__)
    const uint8_t *s = x->s;
    if (x->end - s >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)s);
        __m128i hit = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
            _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
        int mask = _mm_movemask_epi8(hit);
        if (mask) {
            unsigned i = (unsigned)__builtin_ctz((unsigned)mask);
            if (s[i] == '"') {
                if (i == 8 && memcmp(s, "[memory]", 8) == 0) x->mark = 1;
                if (out) {
                    if (out->cap - out->len < 16 && buf_reserve(out, 16)) { x->oom = 1; return REFUSE; }
                    _mm_storeu_si128((__m128i *)(out->p + out->len), v);
                    out->len += i;
                }
                x->s = s + i + 1;
                return 0;
            }
        }
    }
#endif
    return string(x, out, raw);
}

typedef struct {
    const uint8_t *start, *stop;
    int neg, int_only, sig;  /* sig: significant digits (leading zeros not counted), 20 for more */
    uint64_t mant;           /* the significant digits as an integer (while sig <= 19) */
    int64_t exp10;           /* value = mant * 10^exp10 (while sig <= 19) */
} Num;

/* number()'s exponent, x->s at the 'e' or 'E' (or at what follows the digits: then none). */
static inline int exponent(Ctx *x, Num *n) {
    const uint8_t *s = x->s, *e = x->end;
    if (s < e && (*s == 'e' || *s == 'E')) {
        n->int_only = 0;
        s++;
        int eneg = 0;
        if (s < e && (*s == '+' || *s == '-')) { eneg = *s == '-'; s++; }
        if (s >= e || *s < '0' || *s > '9') return REFUSE;
        int64_t ev = 0;
        while (s < e && *s >= '0' && *s <= '9') {
            if (ev < 100000) ev = ev * 10 + (*s - '0');
            s++;
        }
        n->exp10 += eneg ? -ev : ev;
    }
    n->stop = s;
    x->s = s;
    return 0;
}

/* A JSON number at x->s (strict grammar). Its digits are read in one pass each (integer part,
   fraction). Of a number of more than 19 significant digits only that is kept (sig 20; mant and
   exp10 are then not read: num_int refuses it, num_double reads its text with strtod). */
static int number(Ctx *x, Num *n) {
    const uint8_t *s = x->s, *e = x->end, *start = s;
    int neg = 0;
    if (s < e && *s == '-') { neg = 1; s++; }
    if (s >= e) return REFUSE;
    uint64_t m = 0;
    int64_t sig = 0, exp10 = 0;
    int int_only = 1;
    if (*s == '0') {
        s++;
    } else if (*s >= '1' && *s <= '9') {
        const uint8_t *d = s;
        while (s < e && (uint8_t)(*s - '0') < 10) { m = m * 10 + (uint64_t)(*s - '0'); s++; }
        sig = s - d;
    } else {
        return REFUSE;
    }
    if (s < e && *s == '.') {
        int_only = 0;
        s++;
        if (s >= e || (uint8_t)(*s - '0') >= 10) return REFUSE;
        if (sig == 0)  /* leading zeros: not significant */
            while (s < e && *s == '0') { exp10--; s++; }
        const uint8_t *d = s;
        while (s < e && (uint8_t)(*s - '0') < 10) { m = m * 10 + (uint64_t)(*s - '0'); s++; }
        sig += s - d;
        exp10 -= s - d;
    }
    n->start = start;
    n->neg = neg;
    n->int_only = int_only;
    n->sig = sig > 19 ? 20 : (int)sig;
    n->mant = m;
    n->exp10 = exp10;
    x->s = s;
    return exponent(x, n);
}

/* An integer written as one (no fraction, no exponent), of at most 18 digits. */
static inline int num_int(const Num *n, int64_t *out) {
    if (!n->int_only || n->sig > 18) return REFUSE;
    *out = n->neg ? -(int64_t)n->mant : (int64_t)n->mant;
    return 0;
}

static const double POW10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* The number as the nearest double (as DuckDB's reader rounds it), finite. A mantissa of at most
   2^53 and a power of ten up to 22: one IEEE operation on two exact values, so correctly rounded
   (Clinger's fast path; Kineto's 16-digit timestamps take it); else strtod in the C locale. */
static int num_double(Ctx *x, const Num *n, double *out) {
    double d;
    if (n->sig <= 19 && n->mant <= (1ULL << 53) && n->exp10 >= -22 && n->exp10 <= 22) {
        d = (double)n->mant;
        d = n->exp10 < 0 ? d / POW10[-n->exp10] : d * POW10[n->exp10];
        if (n->neg) d = -d;
    } else {
        char tmp[128];
        size_t len = (size_t)(n->stop - n->start);
        if (len >= sizeof tmp) return REFUSE;
        memcpy(tmp, n->start, len);
        tmp[len] = 0;
        d = strtod_l(tmp, NULL, x->c_locale);
    }
    if (!isfinite(d)) return REFUSE;
    *out = d;
    return 0;
}

/* Whether a number starts at x->s (JSON: '-' or a digit). */
static inline int starts_number(const Ctx *x) {
    return x->s < x->end && (*x->s == '-' || (*x->s >= '0' && *x->s <= '9'));
}

static int literal(Ctx *x, const char *word, size_t len) {
    if ((size_t)(x->end - x->s) < len || memcmp(x->s, word, len)) return REFUSE;
    x->s += len;
    return 0;
}

/* Skips any value (checked strictly). */
static int skip_value(Ctx *x, int depth) {
    ws(x);
    if (x->s >= x->end || depth > 64) return REFUSE;
    uint8_t c = *x->s;
    if (c == '"') { x->s++; return string_fast(x, NULL, 0); }
    if (c == '{' || c == '[') {
        uint8_t close = c == '{' ? '}' : ']';
        x->s++;
        ws(x);
        if (x->s < x->end && *x->s == close) { x->s++; return 0; }
        for (;;) {
            if (c == '{') {
                if (expect(x, '"') || string_fast(x, NULL, 0) || expect(x, ':')) return REFUSE;
            }
            if (skip_value(x, depth + 1)) return REFUSE;
            ws(x);
            if (x->s >= x->end) return REFUSE;
            if (*x->s == ',') { x->s++; continue; }
            if (*x->s == close) { x->s++; return 0; }
            return REFUSE;
        }
    }
    if (c == 't') return literal(x, "true", 4);
    if (c == 'f') return literal(x, "false", 5);
    if (c == 'n') return literal(x, "null", 4);
    Num n;
    return number(x, &n);
}

/* Whether the value at x->s (after whitespace) is null; consumes it when it is. */
static inline int is_null(Ctx *x) {
    ws(x);
    if (x->s < x->end && *x->s == 'n') return literal(x, "null", 4) == 0 ? 1 : -1;
    return 0;
}

/* A value kept as JSON text ("Input Dims" and the like) in the form DuckDB renders it: no
   whitespace; x->s past the whitespace before it. Only what it renders as written: arrays,
   strings without escapes, integers of up to 18 digits (not -0), true, false, null; a value
   inside more than 64 arrays is refused. Read in one loop (``depth``: the arrays open). */
static int kept_json(Ctx *x, Buf *out) {
    int depth = 0;
    for (;;) {  /* a value at x->s */
        if (x->s >= x->end || depth > 64) return REFUSE;
        uint8_t c = *x->s;
        const uint8_t *start = x->s;
        if (c == '[') {
            x->s++;
            if (buf_byte(out, '[')) { x->oom = 1; return REFUSE; }
            ws(x);
            if (x->s < x->end && *x->s == ']') {
                x->s++;
                if (buf_byte(out, ']')) { x->oom = 1; return REFUSE; }
            } else {
                depth++;
                continue;  /* its first item */
            }
        } else {
            if (c == '"') {
                x->s++;
                if (string_fast(x, NULL, 1)) return REFUSE;
            } else if (c == 't') {
                if (literal(x, "true", 4)) return REFUSE;
            } else if (c == 'f') {
                if (literal(x, "false", 5)) return REFUSE;
            } else if (c == 'n') {
                if (literal(x, "null", 4)) return REFUSE;
            } else {
                Num n;
                int64_t v;
                if (number(x, &n) || num_int(&n, &v)) return REFUSE;
                if (n.neg && v == 0) return REFUSE;  /* -0: DuckDB writes 0 */
            }
            if (buf_put_fast(out, start, (size_t)(x->s - start), x->end)) { x->oom = 1; return REFUSE; }
        }
        for (;;) {  /* after a value: the end, or a comma (the next item) or ']' (its array's end) */
            if (depth == 0) return 0;
            ws(x);
            if (x->s >= x->end) return REFUSE;
            uint8_t d = *x->s++;
            if (d != ',' && d != ']') return REFUSE;
            if (buf_byte(out, d)) { x->oom = 1; return REFUSE; }
            if (d == ',') break;
            depth--;
        }
        ws(x);
    }
}

/* A string column's value: a string (unescaped) or null. */
static int str_value(Ctx *x, int col) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    if (at(x, '"') || string_fast(x, &x->col[col].data, 0)) return REFUSE;
    x->set |= 1u << col;
    return 0;
}

static int json_value(Ctx *x, int col) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    if (kept_json(x, &x->col[col].data)) return REFUSE;
    x->set |= 1u << col;
    return 0;
}

static int int_value(Ctx *x, int col, int bits) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    Num n;
    int64_t v;
    if (!starts_number(x)) return REFUSE;
    if (number(x, &n) || num_int(&n, &v)) return REFUSE;
    if (bits == 32) {
        if (v < INT32_MIN || v > INT32_MAX) return REFUSE;
        put_i32(x, col, (int32_t)v);
    } else {
        put_i64(x, col, v);
    }
    return 0;
}

/* A DOUBLE column's value: 1 (read into ``out``), 0 (null) or REFUSE. */
static inline int double_or_null(Ctx *x, double *out) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    Num n;
    if (!starts_number(x) || number(x, &n) || num_double(x, &n, out)) return REFUSE;
    return 1;
}

/* round(v), half away from zero, for |v| < 2^63: v less its integer part toward zero is exact
   (both are doubles; at 2^52 and above v has no fraction), so the comparisons with 1/2 are. */
static inline int64_t round_half_away(double v) {
    int64_t i = (int64_t)v;
    double frac = v - (double)i;
    if (frac >= 0.5) i++;
    else if (frac <= -0.5) i--;
    return i;
}

/* ts and dur: microseconds (double) to ns, round(v * 1000) as DuckDB computes it. From 2^52 on a
   double is a whole number, so round() leaves it and the range is checked before rounding. */
static int ns_value(Ctx *x, int col) {
    double us;
    int rc = double_or_null(x, &us);
    if (rc <= 0) return rc;
    double ns = us * 1000.0;
    if (!(ns > -9.2e18 && ns < 9.2e18)) return REFUSE;
    put_i64(x, col, round_half_away(ns));
    return 0;
}

static int f64_value(Ctx *x, int col) {
    double v;
    int rc = double_or_null(x, &v);
    if (rc <= 0) return rc;
    put_f64(x, col, v);
    return 0;
}

static int list_value(Ctx *x, int col) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    if (at(x, '[')) return REFUSE;
    Column *c = &x->col[col];
    x->set |= 1u << col;
    ws(x);
    if (x->s < x->end && *x->s == ']') { x->s++; return 0; }
    for (;;) {  /* x->s past the whitespace before an item */
        Num n;
        int64_t v;
        if (!starts_number(x)) return REFUSE;
        if (number(x, &n) || num_int(&n, &v) || v < INT32_MIN || v > INT32_MAX) return REFUSE;
        int32_t w = (int32_t)v;
        if (buf_put(&c->data, &w, 4)) { x->oom = 1; return REFUSE; }
        ws(x);
        if (x->s >= x->end) return REFUSE;
        uint8_t d = *x->s++;
        if (d == ']') return 0;
        if (d != ',') return REFUSE;
        ws(x);
    }
}

static inline int is_letter(uint8_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* pid, tid and id: DuckDB reads them as text and TRY_CASTs that to BIGINT; the text is the
   label when the cast fails. Read here: an integer; a string of optional '-' and 1-18 digits
   (a number); an empty string or one that starts with an ASCII letter (a label). Anything
   else is refused. ``label_col`` < 0: the label is not kept (id). */
static int id_value(Ctx *x, int num_col, int label_col) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    if (x->s >= x->end) return REFUSE;
    if (*x->s != '"') return int_value(x, num_col, 64);
    x->s++;
    Buf *out = label_col >= 0 ? &x->col[label_col].data : x->tmp;
    if (label_col < 0) out->len = 0;
    size_t mark = out->len;
    int rc = string(x, out, 0);
    const uint8_t *t = out->p ? out->p + mark : NULL;
    size_t len = out->len - mark;
    if (rc == 0) {
        if (len == 0 || is_letter(t[0])) {
            if (label_col >= 0) x->set |= 1u << label_col;
        } else {
            size_t i = t[0] == '-';
            int digits = 0;
            int64_t v = 0;
            for (; i < len && t[i] >= '0' && t[i] <= '9'; i++, digits++)
                if (digits < 18) v = v * 10 + (t[i] - '0');
            if (i != len || digits == 0 || digits > 18) rc = REFUSE;
            else {
                put_i64(x, num_col, t[0] == '-' ? -v : v);
                out->len = mark;
            }
        }
    }
    return rc;
}

/* Keys: the bytes between the quotes, no escapes; x->s past the whitespace before the key. */
static inline int key(Ctx *x, const uint8_t **k, size_t *klen) {
    if (at(x, '"')) return REFUSE;
    const uint8_t *start = x->s;
    if (string_fast(x, NULL, 1)) return REFUSE;
    *k = start;
    *klen = (size_t)(x->s - 1 - start);
    return expect(x, ':');
}

#define KEY_IS(lit) (memcmp(k, lit, sizeof(lit) - 1) == 0)

/* Once per key and object: DuckDB refuses an object that repeats a key it reads. */
#define ONCE(bit) do { if (*seen & (1u << (bit))) return REFUSE; *seen |= 1u << (bit); } while (0)

/* The members of an object, x->s just past its '{'; MEMBER(x, k, klen, &seen) reads the value of
   the member whose key is k (seen: the keys read so far). */
#define MEMBERS(x, MEMBER)                                                      \
    do {                                                                        \
        ws(x);                                                                  \
        if ((x)->s < (x)->end && *(x)->s == '}') { (x)->s++; return 0; }        \
        uint32_t seen = 0;                                                      \
        for (;;) {                                                              \
            const uint8_t *k;                                                   \
            size_t klen;                                                        \
            if (key((x), &k, &klen) || MEMBER((x), k, klen, &seen)) return REFUSE; \
            ws(x);                                                              \
            if ((x)->s >= (x)->end) return REFUSE;                              \
            uint8_t d = *(x)->s++;                                              \
            if (d == '}') return 0;                                             \
            if (d != ',') return REFUSE;                                        \
            ws(x);                                                              \
        }                                                                       \
    } while (0)

/* An argument's value, by its key: the keys read are told apart by their length first. */
static int arg_member(Ctx *x, const uint8_t *k, size_t klen, uint32_t *seen) {
    switch (klen) {
        case 4:
            if (KEY_IS("grid")) { ONCE(4); return list_value(x, C_GRID); }
            if (KEY_IS("name")) { ONCE(17); return str_value(x, C_META_NAME); }
            break;
        case 5:
            if (KEY_IS("block")) { ONCE(5); return list_value(x, C_BLOCK); }
            if (KEY_IS("bytes")) { ONCE(8); return int_value(x, C_BYTES, 64); }
            if (KEY_IS("flops")) { ONCE(12); return f64_value(x, C_FLOPS); }
            break;
        case 6:
            if (KEY_IS("device")) { ONCE(2); return int_value(x, C_DEVICE, 32); }
            if (KEY_IS("stream")) { ONCE(3); return int_value(x, C_STREAM, 64); }
            break;
        case 9:
            if (KEY_IS("Python id")) { ONCE(15); return int_value(x, C_PYTHON_ID, 64); }
            break;
        case 10:
            if (KEY_IS("Input Dims")) { ONCE(9); return json_value(x, C_INPUT_DIMS); }
            if (KEY_IS("Input type")) { ONCE(10); return json_value(x, C_INPUT_TYPES); }
            break;
        case 11:
            if (KEY_IS("External id")) { ONCE(1); return int_value(x, C_EXTERNAL_ID, 64); }
            if (KEY_IS("correlation")) { ONCE(0); return int_value(x, C_CORRELATION, 64); }
            break;
        case 13:
            if (KEY_IS("shared memory")) { ONCE(7); return int_value(x, C_SHARED_MEM, 64); }
            if (KEY_IS("Fwd thread id")) { ONCE(14); return int_value(x, C_FWD_TID, 64); }
            break;
        case 15:
            if (KEY_IS("Concrete Inputs")) { ONCE(11); return json_value(x, C_CONCRETE_INPUTS); }
            if (KEY_IS("Sequence number")) { ONCE(13); return int_value(x, C_SEQ_NUM, 64); }
            break;
        case 16:
            if (KEY_IS("Python parent id")) { ONCE(16); return int_value(x, C_PYTHON_PARENT_ID, 64); }
            break;
        case 20:
            if (KEY_IS("registers per thread")) { ONCE(6); return int_value(x, C_REGISTERS, 32); }
            break;
    }
    return skip_value(x, 1);
}

static int args_object(Ctx *x) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    if (at(x, '{')) return REFUSE;
    MEMBERS(x, arg_member);
}

/* An event's member, by its key's length first. */
static int event_member(Ctx *x, const uint8_t *k, size_t klen, uint32_t *seen) {
    switch (klen) {
        case 2:
            if (KEY_IS("ph")) { ONCE(0); return str_value(x, C_PH); }
            if (KEY_IS("ts")) { ONCE(5); return ns_value(x, C_TS_NS); }
            if (KEY_IS("id")) { ONCE(7); return id_value(x, C_FLOW_ID, -1); }
            break;
        case 3:
            if (KEY_IS("cat")) { ONCE(1); return str_value(x, C_CAT); }
            if (KEY_IS("pid")) { ONCE(3); return id_value(x, C_PID_NUM, C_PID_LABEL); }
            if (KEY_IS("tid")) { ONCE(4); return id_value(x, C_TID_NUM, C_TID_LABEL); }
            if (KEY_IS("dur")) { ONCE(6); return ns_value(x, C_DUR_NS); }
            break;
        case 4:
            if (KEY_IS("name")) { ONCE(2); return str_value(x, C_NAME); }
            if (KEY_IS("args")) { ONCE(8); return args_object(x); }
            break;
    }
    return skip_value(x, 1);
}

static int event_members(Ctx *x) { MEMBERS(x, event_member); }

static int event(Ctx *x) {
    if (expect(x, '{')) return REFUSE;
    if (row_start(x)) { x->oom = 1; return REFUSE; }
    if (event_members(x)) return REFUSE;
    if (row_end(x)) { x->oom = 1; return REFUSE; }
    return 0;
}

static int batch(Ctx *x) {
    if (expect(x, '[')) return REFUSE;
    ws(x);
    if (x->s < x->end && *x->s == ']') {
        x->s++;
    } else {
        for (;;) {
            if (event(x)) return REFUSE;
            ws(x);
            if (x->s >= x->end) return REFUSE;
            uint8_t d = *x->s++;
            if (d == ']') break;
            if (d != ',') return REFUSE;
        }
    }
    ws(x);
    return x->s == x->end ? 0 : REFUSE;
}

/* ------------------------------------------------------------------------------------------ */
/* Python                                                                                      */

static locale_t C_LOCALE;

/* Each thread's column buffers (a parse thread's pages stay faulted in from one batch to the
   next), freed when the thread ends; a thread's buffers grown past SCRATCH_KEEP bytes (a huge
   batch) are freed after its batch. */
static pthread_key_t SCRATCH_KEY;
static int SCRATCH_KEY_MADE;
#define SCRATCH_KEEP ((size_t)64 << 20)

static void scratch_free(void *p) {
    Scratch *sc = p;
    if (!sc) return;
    for (int i = 0; i < N_COLS; i++) {
        free(sc->col[i].valid.p);
        free(sc->col[i].values.p);
        free(sc->col[i].data.p);
    }
    free(sc->tmp.p);
    free(sc);
}

static Scratch *scratch_of_thread(void) {
    Scratch *sc = pthread_getspecific(SCRATCH_KEY);
    if (sc) return sc;
    sc = calloc(1, sizeof *sc);
    if (sc && pthread_setspecific(SCRATCH_KEY, sc)) { free(sc); sc = NULL; }
    return sc;
}

static size_t scratch_bytes(const Scratch *sc) {
    size_t b = sc->tmp.cap;
    for (int i = 0; i < N_COLS; i++)
        b += sc->col[i].valid.cap + sc->col[i].values.cap + sc->col[i].data.cap;
    return b;
}

/* The memory of a batch's columns handed to Python: one block (its header first), freed when
   the capsule goes. Where it is at least BLOCK_MAP bytes it is mapped on its own, with an eighth
   more room, in whole MiB, the pages it needs populated (the kernel fills them in one call rather
   than a fault each); a freed mapped block of up to POOL_BLOCK_MAX bytes is kept for a later batch (the
   last POOL_SLOTS freed: 4 MiB batches make blocks of ~3 MiB): the ingest drops a batch's
   columns once they are sorted into its chunks, and the next batches' then need no new pages
   (the kernel zeroing each is most of a new block's cost). */
static const char OWNED[] = "gpuscope.ingest._compiled_parser.buffer";
#define ALIGN 64
#define BLOCK_MAP ((size_t)256 << 10)
#define POOL_SLOTS 4
#define POOL_BLOCK_MAX ((size_t)16 << 20)

typedef struct {
    size_t size;  /* bytes mapped or allocated */
    int mapped;
    int fresh;    /* new pages, all zero */
} BlockHead;

static pthread_mutex_t POOL_LOCK = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *POOL[POOL_SLOTS];
static int POOL_NEXT;

static void block_free(void *p) {
    BlockHead h;
    memcpy(&h, p, sizeof h);
    if (!h.mapped) {
        free(p);
        return;
    }
    if (h.size <= POOL_BLOCK_MAX) {  /* kept; the pool full, in place of the one kept longest */
        uint8_t *out = NULL;
        pthread_mutex_lock(&POOL_LOCK);
        int slot = -1;
        for (int i = 0; i < POOL_SLOTS && slot < 0; i++)
            if (!POOL[i]) slot = i;
        if (slot < 0) {
            slot = POOL_NEXT;
            POOL_NEXT = (POOL_NEXT + 1) % POOL_SLOTS;
            out = POOL[slot];
        }
        POOL[slot] = p;
        pthread_mutex_unlock(&POOL_LOCK);
        if (!out) return;
        p = out;
        memcpy(&h, p, sizeof h);
    }
    munmap(p, h.size);
}

static void owned_free(PyObject *capsule) {
    block_free(PyCapsule_GetPointer(capsule, OWNED));
}

/* A block of at least ``size`` bytes: a kept one where one fits (the smallest, if it is not more
   than twice the size), else a new one. */
static uint8_t *block_new(size_t size) {
    uint8_t *p = NULL;
    BlockHead h = {size, size >= BLOCK_MAP, 1};
    if (!h.mapped) {
        if (posix_memalign((void **)&p, ALIGN, size)) return NULL;
        h.fresh = 0;
        memcpy(p, &h, sizeof h);
        return p;
    }
    pthread_mutex_lock(&POOL_LOCK);
    int best = -1;
    size_t best_size = 0;
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (!POOL[i]) continue;
        BlockHead k;
        memcpy(&k, POOL[i], sizeof k);
        if (k.size >= size && k.size / 2 <= size && (best < 0 || k.size < best_size)) {
            best = i;
            best_size = k.size;
        }
    }
    if (best >= 0) {
        p = POOL[best];
        POOL[best] = NULL;
    }
    pthread_mutex_unlock(&POOL_LOCK);
    if (p) {
        h.size = best_size;
        h.fresh = 0;
    } else {
        size_t mib = (size_t)1 << 20;
        if (size > SIZE_MAX / 2) return NULL;
        h.size = (size + size / 8 + mib - 1) & ~(mib - 1);
#if defined(MADV_POPULATE_WRITE)  /* the pages this batch writes, not the room past them */
        p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        (void)madvise(p, size, MADV_POPULATE_WRITE);  /* Linux 5.14 on; before, faulted as written */
#else
        p = mmap(NULL, h.size, PROT_READ | PROT_WRITE,
#ifdef MAP_POPULATE
                 MAP_POPULATE |
#endif
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
#endif
    }
    memcpy(p, &h, sizeof h);
    return p;
}

/* Where each of a column's three buffers lies: its offset in the block and length (length 0:
   b""). */
typedef struct {
    size_t off[N_COLS][3], len[N_COLS][3];
    size_t zeros_off, zeros_len;  /* the run of zeros: (n + 1) * 8 bytes, what any column needs */
    size_t size;
} Layout;

/* The block's layout: the header, then each buffer handed over, 64-byte aligned, then a run of
   zeros. A column without a null hands over no bitmap (Python reads none); a column without a
   value hands over bitmap and values from the run of zeros (offsets all 0, values 0 as the
   scratch's zeroed ones are), as do the columns of the layout the parser does not fill. */
static void layout_of(const Ctx *x, Layout *l) {
    size_t at = ALIGN;
    int64_t n = x->n;
    for (int i = 0; i < N_COLS; i++) {
        const Column *c = &x->col[i];
        size_t lens[3] = {(size_t)(n + 7) / 8, values_bytes(i, n), c->data.len};
        if (c->count == n) lens[0] = 0;
        for (int k = 0; k < 3; k++) {
            l->len[i][k] = lens[k];
            l->off[i][k] = 0;
            if (!lens[k] || (c->count == 0 && k < 2)) continue;  /* b"", or the zeros */
            l->off[i][k] = at;
            at += (lens[k] + ALIGN - 1) & ~(size_t)(ALIGN - 1);
        }
    }
    l->zeros_off = at;
    l->zeros_len = ((size_t)n + 1) * 8;
    for (int i = 0; i < N_COLS; i++)
        if (x->col[i].count == 0)
            for (int k = 0; k < 2; k++)
                if (l->len[i][k]) l->off[i][k] = at;
    l->size = at + l->zeros_len;
}

/* The columns copied into their block (without the GIL), or NULL when memory ran out. */
static uint8_t *hand_over(const Ctx *x, Layout *l) {
    layout_of(x, l);
    uint8_t *block = block_new(l->size);
    if (!block) return NULL;
    for (int i = 0; i < N_COLS; i++) {
        const Column *c = &x->col[i];
        const Buf *bufs[3] = {&c->valid, &c->values, &c->data};
        for (int k = 0; k < 3; k++)
            if (l->len[i][k] && l->off[i][k] != l->zeros_off)
                memcpy(block + l->off[i][k], bufs[k]->p, l->len[i][k]);
    }
    BlockHead h;
    memcpy(&h, block, sizeof h);
    if (!h.fresh) memset(block + l->zeros_off, 0, l->zeros_len);  /* new pages are zeros */
    return block;
}

/* A buffer handed over: (address, length, owner), b"" when empty. */
static PyObject *handed(const uint8_t *p, size_t len, PyObject *owner) {
    if (!len) return PyBytes_FromStringAndSize("", 0);
    return Py_BuildValue("(KnO)", (unsigned long long)(uintptr_t)p, (Py_ssize_t)len, owner);
}

/* A context over the bytes ``arg`` (0), or -1 with TypeError set when it is not bytes. */
static int ctx_over(PyObject *arg, const char *fn, Ctx *x) {
    char *data;
    Py_ssize_t size;
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s() takes bytes", fn);
        return -1;
    }
    if (PyBytes_AsStringAndSize(arg, &data, &size) < 0) return -1;
    memset(x, 0, sizeof *x);
    x->s = (const uint8_t *)data;
    x->end = x->s + size;
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(data: bytes) -> tuple | None\n\n"
"The batch's events as column buffers: (rows, columns, memory mark, zeros), a column being\n"
"(validity bitmap, values or int32 offsets, string bytes or list items, null count), in the order\n"
"of gpuscope.ingest.compiled_parser.COLUMNS, each buffer b\"\" or (address, length, owner) handed\n"
"over without a copy (the owner, one for the batch, frees their memory); a column without a null\n"
"has no bitmap (b\"\"); the memory mark:\n"
"whether the batch's text holds batch_insert.MEMORY_MARK; zeros: (address, length, owner) of\n"
"(rows + 1) * 8 zero bytes, for the columns of the layout the parser does not fill.\n"
"None when the batch is refused (read it the other way).");

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Ctx x;
    if (ctx_over(arg, "scan", &x)) return NULL;
    x.c_locale = C_LOCALE;
    Scratch *sc = scratch_of_thread();
    if (!sc) return PyErr_NoMemory();
    x.col = sc->col;
    x.tmp = &sc->tmp;
    for (int i = 0; i < N_COLS; i++) {  /* the last batch's: written over (zeroed as rows come) */
        sc->col[i].valid.len = sc->col[i].values.len = sc->col[i].data.len = 0;
        sc->col[i].count = 0;
    }
    int rc;
    Layout l = {0};
    uint8_t *block = NULL;
    Py_INCREF(arg);  /* the bytes stay alive (and unchanged) while the GIL is released */
    Py_BEGIN_ALLOW_THREADS
    rc = reserve_rows(&x, 0);  /* offsets start with 0 */
    if (rc) x.oom = 1;
    if (rc == 0) rc = batch(&x);
    if (rc == 0) {
        block = hand_over(&x, &l);
        if (!block) { x.oom = 1; rc = REFUSE; }
    }
    if (scratch_bytes(sc) > SCRATCH_KEEP) {
        scratch_free(sc);
        pthread_setspecific(SCRATCH_KEY, NULL);
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(arg);
    if (rc) {
        if (x.oom) return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    PyObject *owner = PyCapsule_New(block, OWNED, owned_free);
    if (!owner) { block_free(block); return NULL; }
    PyObject *cols = PyTuple_New(N_COLS);
    if (!cols) { Py_DECREF(owner); return NULL; }
    for (int i = 0; i < N_COLS; i++) {
        PyObject *bufs[3];
        for (int k = 0; k < 3; k++) bufs[k] = handed(block + l.off[i][k], l.len[i][k], owner);
        PyObject *item = Py_BuildValue("(NNNL)", bufs[0], bufs[1], bufs[2],
                                       (long long)(x.n - x.col[i].count));
        if (!item) { Py_DECREF(cols); Py_DECREF(owner); return NULL; }
        PyTuple_SetItem(cols, i, item);
    }
    PyObject *out = Py_BuildValue("(LNNN)", (long long)x.n, cols, PyBool_FromLong(x.mark),
                                  handed(block + l.zeros_off, l.zeros_len, owner));
    Py_DECREF(owner);  /* the buffers hold it */
    return out;
}

/* The elements of a strict JSON array whose elements are all objects, or -1. */
static int64_t objects_in(Ctx *x) {
    int64_t n = 0;
    if (expect(x, '[')) return -1;
    ws(x);
    if (x->s < x->end && *x->s == ']') {
        x->s++;
    } else {
        for (;;) {
            ws(x);
            if (x->s >= x->end || *x->s != '{' || skip_value(x, 0)) return -1;
            n++;
            ws(x);
            if (x->s >= x->end) return -1;
            uint8_t d = *x->s++;
            if (d == ']') break;
            if (d != ',') return -1;
        }
    }
    ws(x);
    return x->s == x->end ? n : -1;
}

PyDoc_STRVAR(count_objects_doc,
"count_objects(data: bytes) -> int | None\n\n"
"How many objects the batch holds when it is a strict JSON array of objects (every value checked,\n"
"UTF-8 included); None when it is not, or nests deeper than 64.");

static PyObject *count_objects(PyObject *self, PyObject *arg) {
    (void)self;
    Ctx x;
    if (ctx_over(arg, "count_objects", &x)) return NULL;
    int64_t n;
    Py_INCREF(arg);
    Py_BEGIN_ALLOW_THREADS
    n = objects_in(&x);
    Py_END_ALLOW_THREADS
    Py_DECREF(arg);
    if (n < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)n);
}

PyDoc_STRVAR(concat_doc,
"concat(parts: tuple) -> bytes\n\n"
"The parts (bytes-like objects) joined, as b''.join(parts), copied without the GIL (the\n"
"splitting thread's batch copy then leaves the GIL to the parse and writer threads).");

static PyObject *concat(PyObject *self, PyObject *parts) {
    (void)self;
    if (!PyTuple_Check(parts)) {
        PyErr_SetString(PyExc_TypeError, "concat() takes a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_Size(parts), got = 0, total = 0;
    Py_buffer *views = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
    if (!views) return PyErr_NoMemory();
    PyObject *out = NULL;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PyTuple_GetItem(parts, got), &views[got], PyBUF_SIMPLE) < 0)
            goto done;
        if (views[got].len > PY_SSIZE_T_MAX - total) {
            got++;
            PyErr_SetString(PyExc_OverflowError, "concat(): the parts are too long together");
            goto done;
        }
        total += views[got].len;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *dst = PyBytes_AsString(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (views[i].len) memcpy(dst, views[i].buf, (size_t)views[i].len);
        dst += views[i].len;
    }
    Py_END_ALLOW_THREADS
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    return out;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_O, scan_doc},
    {"count_objects", count_objects, METH_O, count_objects_doc},
    {"concat", concat, METH_O, concat_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_compiled_parser",
    "Kineto trace batches parsed to column buffers in C (gpuscope.ingest.compiled_parser).",
    -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__compiled_parser(void) {
    init_tables();
    if (!SCRATCH_KEY_MADE) {
        if (pthread_key_create(&SCRATCH_KEY, scratch_free)) return PyErr_NoMemory();
        SCRATCH_KEY_MADE = 1;
    }
    C_LOCALE = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!C_LOCALE) return PyErr_NoMemory();
    return PyModule_Create(&MODULE);
}
