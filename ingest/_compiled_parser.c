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
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

typedef struct {
    Buf valid;   /* validity bitmap, a bit per row */
    Buf values;  /* fixed-width values; string/list: int32 offsets (n + 1) */
    Buf data;    /* string bytes; list: the int32 items */
    int64_t nulls;
    int set;     /* this row's value was written */
} Column;

typedef struct {
    const uint8_t *s, *end;
    Column col[N_COLS];
    int64_t n;
    int64_t cap_rows;  /* rows the validity bitmaps and fixed-width values have room for */
    locale_t c_locale;
    int oom;
} Ctx;

static inline size_t width(int i) {
    return KIND[i] == K_I32 ? 4 : (KIND[i] == K_I64 || KIND[i] == K_F64) ? 8 : 0;
}

/* Room for ``rows`` rows in every bitmap and fixed-width value buffer (checked once per row
   count, not per value). */
static int reserve_rows(Ctx *x, int64_t rows) {
    for (int i = 0; i < N_COLS; i++) {
        Column *c = &x->col[i];
        size_t bytes = (size_t)(rows + 7) / 8;
        if (bytes > c->valid.len && buf_reserve(&c->valid, bytes - c->valid.len)) return -1;
        size_t w = width(i);
        if (w && (size_t)rows * w > c->values.len && buf_reserve(&c->values, (size_t)rows * w - c->values.len))
            return -1;
    }
    x->cap_rows = rows;
    return 0;
}

static inline void set_valid(Column *c, int64_t row) { c->valid.p[row >> 3] |= (uint8_t)(1u << (row & 7)); }

/* A new row: a zero byte of validity every 8 rows, a zero value for fixed-width columns. */
static int row_start(Ctx *x) {
    if (x->n >= x->cap_rows && reserve_rows(x, x->cap_rows ? 2 * x->cap_rows : 1024)) return -1;
    for (int i = 0; i < N_COLS; i++) {
        Column *c = &x->col[i];
        c->set = 0;
        if ((x->n & 7) == 0) c->valid.p[c->valid.len++] = 0;
        size_t w = width(i);
        if (w) {
            memset(c->values.p + c->values.len, 0, w);
            c->values.len += w;
        }
    }
    return 0;
}

/* The row's end: offsets of variable-width columns; ph and cat are never null ('' for none). */
static int row_end(Ctx *x) {
    for (int i = 0; i < N_COLS; i++) {
        Column *c = &x->col[i];
        if (!c->set && (i == C_PH || i == C_CAT)) c->set = 1;
        if (c->set) set_valid(c, x->n);
        else c->nulls++;
        if (KIND[i] == K_STR || KIND[i] == K_LIST) {
            size_t end = KIND[i] == K_STR ? c->data.len : c->data.len / 4;
            if (end > INT32_MAX) return -1;
            int32_t off = (int32_t)end;
            if (buf_put(&c->values, &off, 4)) return -1;
        }
    }
    x->n++;
    return 0;
}

static inline void put_i64(Ctx *x, int col, int64_t v) {
    Column *c = &x->col[col];
    memcpy(c->values.p + (size_t)x->n * 8, &v, 8);
    c->set = 1;
}

static inline void put_i32(Ctx *x, int col, int32_t v) {
    Column *c = &x->col[col];
    memcpy(c->values.p + (size_t)x->n * 4, &v, 4);
    c->set = 1;
}

static inline void put_f64(Ctx *x, int col, double v) {
    Column *c = &x->col[col];
    memcpy(c->values.p + (size_t)x->n * 8, &v, 8);
    c->set = 1;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON pieces. Each returns 0, or -1 to refuse the batch (x->oom says when memory ran out).   */

#define REFUSE (-1)

static inline void ws(Ctx *x) {
    const uint8_t *s = x->s, *e = x->end;
    while (s < e && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++;
    x->s = s;
}

static inline int expect(Ctx *x, uint8_t ch) {
    ws(x);
    if (x->s >= x->end || *x->s != ch) return REFUSE;
    x->s++;
    return 0;
}

/* Bytes that may stand in a string as they are: printable ASCII but the quote and backslash. */
static uint8_t PLAIN[256];

static void init_tables(void) {
    for (int i = 0; i < 256; i++) PLAIN[i] = (i >= 0x20 && i < 0x80 && i != '"' && i != '\\');
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
   (NULL: only checked). ``raw``: no escapes allowed (keys, and strings of kept JSON). */
static int string(Ctx *x, Buf *out, int raw) {
    const uint8_t *s = x->s, *e = x->end, *run = s;
    for (;;) {
#if defined(__SSE2__)
        /* sixteen bytes at a time: stop at the first quote, backslash, control or non-ASCII byte
           (as a signed byte, one below 0x20 is a control or has its high bit set) */
        {
            const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\');
            const __m128i space = _mm_set1_epi8(0x20);
            while (e - s >= 16) {
                __m128i v = _mm_loadu_si128((const __m128i *)s);
                __m128i hit = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                    _mm_cmplt_epi8(v, space));
                int mask = _mm_movemask_epi8(hit);
                if (mask) { s += __builtin_ctz((unsigned)mask); break; }
                s += 16;
            }
        }
#endif
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
        if (s >= e) return REFUSE;
        uint8_t ch = *s;
        if (ch == '"') {
            if (out && buf_put(out, run, (size_t)(s - run))) { x->oom = 1; return REFUSE; }
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

typedef struct {
    const uint8_t *start, *stop;
    int neg, int_only, sig;  /* sig: significant digits (leading zeros not counted), capped */
    uint64_t mant;           /* the first 19 significant digits, as an integer */
    int64_t exp10;           /* value = mant * 10^exp10 (while sig <= 19) */
} Num;

/* A JSON number at x->s (strict grammar). */
static int number(Ctx *x, Num *n) {
    const uint8_t *s = x->s, *e = x->end;
    n->start = s;
    n->neg = 0; n->int_only = 1; n->sig = 0; n->mant = 0; n->exp10 = 0;
    if (s < e && *s == '-') { n->neg = 1; s++; }
    if (s >= e) return REFUSE;
    if (*s == '0') {
        s++;
    } else if (*s >= '1' && *s <= '9') {
        while (s < e && *s >= '0' && *s <= '9') {
            if (n->sig < 19) n->mant = n->mant * 10 + (uint64_t)(*s - '0');
            else n->exp10++;
            n->sig++;
            s++;
        }
    } else {
        return REFUSE;
    }
    if (s < e && *s == '.') {
        n->int_only = 0;
        s++;
        if (s >= e || *s < '0' || *s > '9') return REFUSE;
        while (s < e && *s >= '0' && *s <= '9') {
            if (n->sig == 0 && *s == '0') { n->exp10--; s++; continue; }  /* leading zeros */
            if (n->sig < 19) { n->mant = n->mant * 10 + (uint64_t)(*s - '0'); n->exp10--; }
            n->sig++;
            s++;
        }
    }
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

/* An integer written as one (no fraction, no exponent), of at most 18 digits. */
static int num_int(const Num *n, int64_t *out) {
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
    if (c == '"') { x->s++; return string(x, NULL, 0); }
    if (c == '{' || c == '[') {
        uint8_t close = c == '{' ? '}' : ']';
        x->s++;
        ws(x);
        if (x->s < x->end && *x->s == close) { x->s++; return 0; }
        for (;;) {
            if (c == '{') {
                if (expect(x, '"') || string(x, NULL, 0) || expect(x, ':')) return REFUSE;
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
static int is_null(Ctx *x) {
    ws(x);
    if (x->s < x->end && *x->s == 'n') return literal(x, "null", 4) == 0 ? 1 : -1;
    return 0;
}

/* A value kept as JSON text ("Input Dims" and the like) in the form DuckDB renders it: no
   whitespace. Only what it renders as written: arrays, strings without escapes, integers of up
   to 18 digits (not -0), true, false, null. */
static int kept_json(Ctx *x, Buf *out, int depth) {
    ws(x);
    if (x->s >= x->end || depth > 64) return REFUSE;
    uint8_t c = *x->s;
    if (c == '"') {
        const uint8_t *start = x->s;
        x->s++;
        if (string(x, NULL, 1)) return REFUSE;
        if (buf_put(out, start, (size_t)(x->s - start))) { x->oom = 1; return REFUSE; }
        return 0;
    }
    if (c == '[') {
        x->s++;
        if (buf_byte(out, '[')) { x->oom = 1; return REFUSE; }
        ws(x);
        if (x->s < x->end && *x->s == ']') {
            x->s++;
            if (buf_byte(out, ']')) { x->oom = 1; return REFUSE; }
            return 0;
        }
        for (;;) {
            if (kept_json(x, out, depth + 1)) return REFUSE;
            ws(x);
            if (x->s >= x->end) return REFUSE;
            uint8_t d = *x->s++;
            if (d != ',' && d != ']') return REFUSE;
            if (buf_byte(out, d)) { x->oom = 1; return REFUSE; }
            if (d == ']') return 0;
        }
    }
    const uint8_t *start = x->s;
    if (c == 't') { if (literal(x, "true", 4)) return REFUSE; }
    else if (c == 'f') { if (literal(x, "false", 5)) return REFUSE; }
    else if (c == 'n') { if (literal(x, "null", 4)) return REFUSE; }
    else {
        Num n;
        int64_t v;
        if (number(x, &n) || num_int(&n, &v)) return REFUSE;
        if (n.neg && v == 0) return REFUSE;  /* -0: DuckDB writes 0 */
    }
    if (buf_put(out, start, (size_t)(x->s - start))) { x->oom = 1; return REFUSE; }
    return 0;
}

/* A string column's value: a string (unescaped) or null. */
static int str_value(Ctx *x, int col) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    if (expect(x, '"') || string(x, &x->col[col].data, 0)) return REFUSE;
    x->col[col].set = 1;
    return 0;
}

static int json_value(Ctx *x, int col) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    if (kept_json(x, &x->col[col].data, 0)) return REFUSE;
    x->col[col].set = 1;
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
static int double_or_null(Ctx *x, double *out) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    Num n;
    if (!starts_number(x) || number(x, &n) || num_double(x, &n, out)) return REFUSE;
    return 1;
}

/* ts and dur: microseconds (double) to ns, round(v * 1000) as DuckDB computes it. */
static int ns_value(Ctx *x, int col) {
    double us;
    int rc = double_or_null(x, &us);
    if (rc <= 0) return rc;
    double ns = round(us * 1000.0);
    if (!(ns > -9.2e18 && ns < 9.2e18)) return REFUSE;
    put_i64(x, col, (int64_t)ns);
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
    if (expect(x, '[')) return REFUSE;
    Column *c = &x->col[col];
    c->set = 1;
    ws(x);
    if (x->s < x->end && *x->s == ']') { x->s++; return 0; }
    for (;;) {
        ws(x);
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
    Buf tmp = {0};
    Buf *out = label_col >= 0 ? &x->col[label_col].data : &tmp;
    size_t mark = out->len;
    int rc = string(x, out, 0);
    const uint8_t *t = out->p ? out->p + mark : NULL;
    size_t len = out->len - mark;
    if (rc == 0) {
        if (len == 0 || is_letter(t[0])) {
            if (label_col >= 0) x->col[label_col].set = 1;
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
    free(tmp.p);
    return rc;
}

/* Keys: the bytes between the quotes, no escapes. */
static int key(Ctx *x, const uint8_t **k, size_t *klen) {
    if (expect(x, '"')) return REFUSE;
    const uint8_t *start = x->s;
    if (string(x, NULL, 1)) return REFUSE;
    *k = start;
    *klen = (size_t)(x->s - 1 - start);
    return expect(x, ':');
}

#define KEY_IS(lit) (klen == sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)

/* Once per key and object: DuckDB refuses an object that repeats a key it reads. */
#define ONCE(bit) do { if (*seen & (1u << (bit))) return REFUSE; *seen |= 1u << (bit); } while (0)

/* Reads the value of one member of an object whose key is ``k``; ``seen``: the keys read so far. */
typedef int (*Member)(Ctx *x, const uint8_t *k, size_t klen, uint32_t *seen);

/* The members of an object, x->s just past its '{'. */
static int members(Ctx *x, Member member) {
    ws(x);
    if (x->s < x->end && *x->s == '}') { x->s++; return 0; }
    uint32_t seen = 0;
    for (;;) {
        const uint8_t *k;
        size_t klen;
        if (key(x, &k, &klen) || member(x, k, klen, &seen)) return REFUSE;
        ws(x);
        if (x->s >= x->end) return REFUSE;
        uint8_t d = *x->s++;
        if (d == '}') return 0;
        if (d != ',') return REFUSE;
    }
}

static int arg_member(Ctx *x, const uint8_t *k, size_t klen, uint32_t *seen) {
    if (KEY_IS("correlation")) { ONCE(0); return int_value(x, C_CORRELATION, 64); }
    if (KEY_IS("External id")) { ONCE(1); return int_value(x, C_EXTERNAL_ID, 64); }
    if (KEY_IS("device")) { ONCE(2); return int_value(x, C_DEVICE, 32); }
    if (KEY_IS("stream")) { ONCE(3); return int_value(x, C_STREAM, 64); }
    if (KEY_IS("grid")) { ONCE(4); return list_value(x, C_GRID); }
    if (KEY_IS("block")) { ONCE(5); return list_value(x, C_BLOCK); }
    if (KEY_IS("registers per thread")) { ONCE(6); return int_value(x, C_REGISTERS, 32); }
    if (KEY_IS("shared memory")) { ONCE(7); return int_value(x, C_SHARED_MEM, 64); }
    if (KEY_IS("bytes")) { ONCE(8); return int_value(x, C_BYTES, 64); }
    if (KEY_IS("Input Dims")) { ONCE(9); return json_value(x, C_INPUT_DIMS); }
    if (KEY_IS("Input type")) { ONCE(10); return json_value(x, C_INPUT_TYPES); }
    if (KEY_IS("Concrete Inputs")) { ONCE(11); return json_value(x, C_CONCRETE_INPUTS); }
    if (KEY_IS("flops")) { ONCE(12); return f64_value(x, C_FLOPS); }
    if (KEY_IS("Sequence number")) { ONCE(13); return int_value(x, C_SEQ_NUM, 64); }
    if (KEY_IS("Fwd thread id")) { ONCE(14); return int_value(x, C_FWD_TID, 64); }
    if (KEY_IS("Python id")) { ONCE(15); return int_value(x, C_PYTHON_ID, 64); }
    if (KEY_IS("Python parent id")) { ONCE(16); return int_value(x, C_PYTHON_PARENT_ID, 64); }
    if (KEY_IS("name")) { ONCE(17); return str_value(x, C_META_NAME); }
    return skip_value(x, 1);
}

static int args_object(Ctx *x) {
    int nl = is_null(x);
    if (nl) return nl < 0 ? REFUSE : 0;
    if (expect(x, '{')) return REFUSE;
    return members(x, arg_member);
}

static int event_member(Ctx *x, const uint8_t *k, size_t klen, uint32_t *seen) {
    if (KEY_IS("ph")) { ONCE(0); return str_value(x, C_PH); }
    if (KEY_IS("cat")) { ONCE(1); return str_value(x, C_CAT); }
    if (KEY_IS("name")) { ONCE(2); return str_value(x, C_NAME); }
    if (KEY_IS("pid")) { ONCE(3); return id_value(x, C_PID_NUM, C_PID_LABEL); }
    if (KEY_IS("tid")) { ONCE(4); return id_value(x, C_TID_NUM, C_TID_LABEL); }
    if (KEY_IS("ts")) { ONCE(5); return ns_value(x, C_TS_NS); }
    if (KEY_IS("dur")) { ONCE(6); return ns_value(x, C_DUR_NS); }
    if (KEY_IS("id")) { ONCE(7); return id_value(x, C_FLOW_ID, -1); }
    if (KEY_IS("args")) { ONCE(8); return args_object(x); }
    return skip_value(x, 1);
}

static int event(Ctx *x) {
    if (expect(x, '{')) return REFUSE;
    if (row_start(x)) { x->oom = 1; return REFUSE; }
    if (members(x, event_member)) return REFUSE;
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

static void ctx_free(Ctx *x) {
    for (int i = 0; i < N_COLS; i++) {
        free(x->col[i].valid.p);
        free(x->col[i].values.p);
        free(x->col[i].data.p);
    }
}

/* The memory of a column buffer handed to Python: freed when the capsule goes. */
static const char OWNED[] = "gpuscope.ingest._compiled_parser.buffer";

static void owned_free(PyObject *capsule) {
    free(PyCapsule_GetPointer(capsule, OWNED));
}

/* A buffer handed over without a copy: (address, length, owner), the owner a capsule that frees
 * the memory when the last reference to it goes (pyarrow.foreign_buffer keeps it); b"" when the
 * buffer is empty. The buffer is emptied here (its memory is the capsule's now). */
static PyObject *as_owned(Buf *b) {
    if (b->len == 0) return PyBytes_FromStringAndSize("", 0);
    PyObject *owner = PyCapsule_New(b->p, OWNED, owned_free);
    if (!owner) return NULL;
    PyObject *out = Py_BuildValue("(KnN)", (unsigned long long)(uintptr_t)b->p,
                                  (Py_ssize_t)b->len, owner);
    b->p = NULL;  /* the capsule frees it now, also when Py_BuildValue failed */
    b->len = b->cap = 0;
    return out;
}

/* Every column buffer cut to its length (without the GIL): what is handed to Python stays as
 * small as a copy of it would be. */
static void shrink_all(Ctx *x) {
    for (int i = 0; i < N_COLS; i++) {
        Buf *bs[3] = {&x->col[i].valid, &x->col[i].values, &x->col[i].data};
        for (int k = 0; k < 3; k++) {
            Buf *b = bs[k];
            if (b->len && b->len < b->cap) {
                uint8_t *q = realloc(b->p, b->len);
                if (q) {
                    b->p = q;
                    b->cap = b->len;
                }
            }
        }
    }
}

static const char MEMORY_MARK[] = "\"[memory]\"";  /* batch_insert.MEMORY_MARK */

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
"The batch's events as column buffers: (rows, columns, memory mark), a column being (validity\n"
"bitmap, values or int32 offsets, string bytes or list items, null count), in the order of\n"
"gpuscope.ingest.compiled_parser.COLUMNS, each buffer b\"\" or (address, length, owner) handed\n"
"over without a copy (the owner frees it); the memory mark: whether the batch's text holds\n"
"batch_insert.MEMORY_MARK. None when the batch is refused (read it the other way).");

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Ctx x;
    if (ctx_over(arg, "scan", &x)) return NULL;
    x.c_locale = C_LOCALE;
    int rc, mark = 0;
    const uint8_t *start = x.s;
    Py_INCREF(arg);  /* the bytes stay alive (and unchanged) while the GIL is released */
    Py_BEGIN_ALLOW_THREADS
    rc = 0;
    for (int i = 0; i < N_COLS && rc == 0; i++)  /* offsets start with 0 */
        if (KIND[i] == K_STR || KIND[i] == K_LIST) {
            int32_t zero = 0;
            if (buf_put(&x.col[i].values, &zero, 4)) { x.oom = 1; rc = REFUSE; }
        }
    if (rc == 0) rc = batch(&x);
    if (rc == 0) {
        shrink_all(&x);
        mark = memmem(start, (size_t)(x.end - start), MEMORY_MARK, sizeof MEMORY_MARK - 1) != NULL;
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(arg);
    if (rc) {
        int oom = x.oom;
        ctx_free(&x);
        if (oom) return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    PyObject *cols = PyTuple_New(N_COLS);
    if (!cols) { ctx_free(&x); return NULL; }
    for (int i = 0; i < N_COLS; i++) {
        Column *c = &x.col[i];
        PyObject *item = Py_BuildValue("(NNNL)", as_owned(&c->valid), as_owned(&c->values),
                                       as_owned(&c->data), (long long)c->nulls);
        if (!item) { Py_DECREF(cols); ctx_free(&x); return NULL; }
        PyTuple_SetItem(cols, i, item);
    }
    ctx_free(&x);  /* what was not handed over */
    return Py_BuildValue("(LNN)", (long long)x.n, cols, PyBool_FromLong(mark));
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
    C_LOCALE = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!C_LOCALE) return PyErr_NoMemory();
    return PyModule_Create(&MODULE);
}
