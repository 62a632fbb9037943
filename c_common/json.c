/* The strict JSON reader (json.h): one pass over the document with an explicit stack, no recursion
 * and no allocation; the members asked for are recorded by position and decoded afterwards. */
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define KEY_MAX 32   /* longer keys are never one we look for */

/* Where a string's decoded bytes go: an object key (a small buffer; a longer key matches nothing),
 * or a value asked for (json_string: a buffer as long as the raw string). */
struct sink {
    char *buf;
    size_t cap, len;
    int overflow;
    int nul;             /* holds \u0000 */
    int lone_surrogate;  /* holds half a surrogate pair */
};

/* Scanning state: the string, number and literal scanners need only the text. */
struct parser {
    const unsigned char *s;
    size_t len, pos;
    struct json_error *err;
    /* the document scanner's */
    size_t depth;
    struct json_query *queries;
    size_t nqueries;
    unsigned char *kinds;   /* '{' or '[' of each open container, JSON_MAX_DEPTH of them */
};

enum state { AFTER_OPEN, AFTER_VALUE };

static int fail_at(struct parser *p, const char *what, size_t offset)
{
    p->err->what = what;
    p->err->offset = offset;
    return -1;
}

static int fail(struct parser *p, const char *what)
{
    return fail_at(p, what, p->pos);
}

static int peek(const struct parser *p)
{
    return p->pos < p->len ? p->s[p->pos] : -1;
}

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static void skip_ws(struct parser *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n'
                               || p->s[p->pos] == '\r'))
        p->pos++;
}

/* -- strings ------------------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;

    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        n = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        n = 3, lo = s[0] == 0xe0 ? 0xa0 : 0x80, hi = s[0] == 0xed ? 0x9f : 0xbf;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        n = 4, lo = s[0] == 0xf0 ? 0x90 : 0x80, hi = s[0] == 0xf4 ? 0x8f : 0xbf;
    else
        return 0;
    if (avail < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

/* The value of 4 hex digits at s (avail bytes there), or -1. */
static long hex4(const unsigned char *s, size_t avail)
{
    long v = 0;

    if (avail < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        int c = s[i];
        int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t utf8_encode(long cp, char *out)
{
    if (cp < 0x80)
        return out[0] = (char)cp, 1;
    if (cp < 0x800)
        return out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000)
        return out[0] = (char)(0xe0 | (cp >> 12)), out[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
               out[2] = (char)(0x80 | (cp & 0x3f)), 3;
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A \uXXXX escape at s (and the low half of a surrogate pair after it): the code point, or -1 for
 * bad hex digits. *used: bytes consumed; a lone surrogate is returned as it is (JSON allows it). */
static long unicode_escape(const unsigned char *s, size_t avail, size_t *used)
{
    long cp = hex4(s + 2, avail - 2), low;

    *used = 6;
    if (cp >= 0xd800 && cp <= 0xdbff && avail >= 12 && s[6] == '\\' && s[7] == 'u'
        && (low = hex4(s + 8, avail - 8)) >= 0xdc00 && low <= 0xdfff) {
        *used = 12;
        return 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    return cp;
}

static void sink_add(struct sink *sink, const char *bytes, size_t n)
{
    if (sink == NULL || sink->overflow)
        return;
    if (sink->len + n > sink->cap) {
        sink->overflow = 1;
        return;
    }
    memcpy(sink->buf + sink->len, bytes, n);
    sink->len += n;
}

/* One escape sequence at s (s[0] == '\\', avail >= 2): its decoded bytes go to sink. Returns its
 * length, or 0. */
static size_t escape(const unsigned char *s, size_t avail, struct sink *sink, const char **what)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    char utf8[4];
    size_t used;
    long cp;

    if (s[1] != 'u' && s[1] && strchr(from, s[1])) {
        sink_add(sink, &to[strchr(from, s[1]) - from], 1);
        return 2;
    }
    if (s[1] != 'u') {
        *what = "Invalid \\escape";
        return 0;
    }
    cp = unicode_escape(s, avail, &used);
    if (cp < 0) {
        *what = "Invalid \\uXXXX escape";
        return 0;
    }
    if (sink && cp >= 0xd800 && cp <= 0xdfff)
        sink->lone_surrogate = 1;
    else if (sink && cp == 0)
        sink->nul = 1;
    if (cp < 0xd800 || cp > 0xdfff)
        sink_add(sink, utf8, utf8_encode(cp, utf8));
    return used;
}

/* The string at pos (s[pos] == '"'), validated; decoded into sink when sink is not NULL. */
static int scan_string(struct parser *p, struct sink *sink)
{
    size_t start = p->pos++, n;
    const char *what = NULL;

    for (;;) {
        int c = peek(p);
        if (c < 0)
            return fail_at(p, "Unterminated string starting at", start);
        if (c == '"') {
            p->pos++;
            return 0;
        }
        if (c == '\\') {
            if (p->pos + 1 >= p->len)
                return fail_at(p, "Unterminated string starting at", start);
            n = escape(p->s + p->pos, p->len - p->pos, sink, &what);
            if (n == 0)
                return fail(p, what);
        } else if (c < 0x20) {
            return fail(p, "Invalid control character at");
        } else if (c < 0x80) {
            char ch = (char)c;
            sink_add(sink, &ch, 1);
            n = 1;
        } else {
            n = utf8_len(p->s + p->pos, p->len - p->pos);
            if (n == 0)
                return fail(p, "Invalid UTF-8");
            sink_add(sink, (const char *)p->s + p->pos, n);
        }
        p->pos += n;
    }
}

/* -- numbers and literals ---------------------------------------------------------------------- */

static void skip_digits(struct parser *p)
{
    while (is_digit(peek(p)))
        p->pos++;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?: an optional part that is not complete is not
 * taken (what follows is then an error of the enclosing value, as in Python's scanner). */
static int scan_number(struct parser *p)
{
    size_t start = p->pos;

    if (peek(p) == '-')
        p->pos++;
    if (peek(p) == '0')
        p->pos++;
    else if (is_digit(peek(p)))
        skip_digits(p);
    else
        return fail_at(p, "Expecting value", start);
    if (peek(p) == '.' && p->pos + 1 < p->len && is_digit(p->s[p->pos + 1])) {
        p->pos++;
        skip_digits(p);
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        size_t at = p->pos + 1;
        if (at < p->len && (p->s[at] == '+' || p->s[at] == '-'))
            at++;
        if (at < p->len && is_digit(p->s[at])) {
            p->pos = at;
            skip_digits(p);
        }
    }
    return 0;
}

static int scan_literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);

    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "Expecting value");
    p->pos += n;
    return 0;
}

/* -- the members asked for ---------------------------------------------------------------------- */

static size_t path_len(const struct json_query *q)
{
    size_t n = 0;

    while (q->path[n])
        n++;
    return n;
}

/* Keys are compared decoded ("r\u006fot" is "root"); one with a lone surrogate is no name of ours. */
static int key_is(const struct sink *key, const char *name)
{
    return key && !key->overflow && !key->lone_surrogate && key->len == strlen(name)
           && memcmp(key->buf, name, key->len) == 0;
}

/* A value of type `type` starts at pos under `key` in the container at p->depth. Records it for the
 * queries whose member it is; a repeated key on the way replaces what an earlier one gave (last
 * wins). Returns a bit per query (at most 8) whose path goes on into this value (an object). */
static unsigned note_value(struct parser *p, const struct sink *key, enum json_type type)
{
    unsigned descend = 0;

    for (size_t i = 0; i < p->nqueries; i++) {
        struct json_query *q = &p->queries[i];
        size_t d = p->depth, k = path_len(q);
        if (d == 0) {   /* the document itself: the path starts in it when it is an object */
            descend |= (type == JSON_OBJECT) << i;
            continue;
        }
        if (q->on_path != d || d > k || !key_is(key, q->path[d - 1]))
            continue;
        q->found.type = d == k ? type : JSON_ABSENT;
        q->found.start = q->found.end = p->pos;
        if (d < k && type == JSON_OBJECT)
            descend |= 1u << i;
    }
    return descend;
}

/* Sets the end of the scalar just scanned for the queries that recorded it. */
static void note_end(struct parser *p, size_t start)
{
    for (size_t i = 0; i < p->nqueries; i++)
        if (p->queries[i].found.type != JSON_ABSENT && p->queries[i].found.start == start)
            p->queries[i].found.end = p->pos;
}

/* -- the document ------------------------------------------------------------------------------- */

static enum json_type type_at(int c)
{
    switch (c) {
    case '{': return JSON_OBJECT;
    case '[': return JSON_ARRAY;
    case '"': return JSON_STRING;
    case 't': return JSON_TRUE;
    case 'f': return JSON_FALSE;
    case 'n': return JSON_NULL;
    default: return c == '-' || is_digit(c) ? JSON_NUMBER : JSON_ABSENT;
    }
}

static int open_container(struct parser *p, unsigned descend)
{
    if (p->depth >= JSON_MAX_DEPTH)
        return fail(p, "Nesting too deep");
    p->kinds[p->depth++] = p->s[p->pos++];
    for (size_t i = 0; i < p->nqueries; i++)
        if (descend & (1u << i))
            p->queries[i].on_path = p->depth;
    return 0;
}

static void close_container(struct parser *p)
{
    for (size_t i = 0; i < p->nqueries; i++)
        if (p->queries[i].on_path >= p->depth)
            p->queries[i].on_path = p->depth - 1;
    p->depth--;
    p->pos++;
}

/* The value at pos (whitespace skipped) under key (NULL: not in an object). A container is opened
 * (*state AFTER_OPEN), anything else scanned whole (AFTER_VALUE). */
static int value(struct parser *p, const struct sink *key, enum state *state)
{
    enum json_type type = type_at(peek(p));
    size_t start = p->pos;
    unsigned descend;
    int rc;

    if (type == JSON_ABSENT)
        return fail(p, "Expecting value");
    descend = note_value(p, key, type);
    *state = AFTER_VALUE;
    switch (type) {
    case JSON_OBJECT:
    case JSON_ARRAY:
        *state = AFTER_OPEN;
        return open_container(p, descend);
    case JSON_STRING: rc = scan_string(p, NULL); break;
    case JSON_NUMBER: rc = scan_number(p); break;
    case JSON_TRUE: rc = scan_literal(p, "true"); break;
    case JSON_FALSE: rc = scan_literal(p, "false"); break;
    default: rc = scan_literal(p, "null"); break;
    }
    if (rc == 0)
        note_end(p, start);
    return rc;
}

/* One element of the innermost container: "key": value in an object, a value in an array. */
static int member(struct parser *p, enum state *state)
{
    char text[KEY_MAX];
    struct sink key = { text, sizeof(text), 0, 0, 0, 0 };

    if (p->kinds[p->depth - 1] == '[')
        return value(p, NULL, state);
    if (peek(p) != '"')
        return fail(p, "Expecting property name enclosed in double quotes");
    if (scan_string(p, &key) < 0)
        return -1;
    skip_ws(p);
    if (peek(p) != ':')
        return fail(p, "Expecting ':' delimiter");
    p->pos++;
    skip_ws(p);
    return value(p, &key, state);
}

/* After the first value: elements, separators and closing brackets until the document's value is
 * complete. */
static int containers(struct parser *p, enum state state)
{
    while (p->depth > 0) {
        skip_ws(p);
        int close = p->kinds[p->depth - 1] == '{' ? '}' : ']';
        if (peek(p) == close) {
            close_container(p);
            state = AFTER_VALUE;
            continue;
        }
        if (state == AFTER_VALUE) {
            if (peek(p) != ',')
                return fail(p, "Expecting ',' delimiter");
            p->pos++;
            skip_ws(p);
        }
        if (member(p, &state) < 0)
            return -1;
    }
    return 0;
}

int json_scan(const char *doc, size_t len, struct json_query *queries, size_t nqueries, enum json_type *top,
              struct json_error *err)
{
    struct parser parser = { (const unsigned char *)doc, len, 0, err, 0, queries, nqueries, NULL };
    struct parser *p = &parser;
    enum state state;
    int rc = -1;

    err->what = "out of memory";
    err->offset = 0;
    p->kinds = malloc(JSON_MAX_DEPTH);   /* 10 kB: not on the C stack */
    if (p->kinds == NULL || nqueries > 8)
        goto out;
    for (size_t i = 0; i < nqueries; i++) {
        memset(&queries[i].found, 0, sizeof(queries[i].found));
        queries[i].on_path = 0;
    }
    skip_ws(p);
    *top = type_at(peek(p));
    if (value(p, NULL, &state) < 0 || containers(p, state) < 0)
        goto out;
    skip_ws(p);
    rc = p->pos == p->len ? 0 : fail(p, "Extra data");
out:
    free(p->kinds);
    return rc;
}

char *json_string(const char *doc, const struct json_value *v, const char **why)
{
    struct json_error err;
    struct parser p = { (const unsigned char *)doc + v->start, v->end - v->start, 0, &err, 0, NULL, 0, NULL };
    struct sink sink = { NULL, v->end - v->start, 0, 0, 0, 0 };

    *why = "not a string";
    if (v->type != JSON_STRING || v->end < v->start + 2)
        return NULL;
    *why = "out of memory";
    sink.buf = malloc(sink.cap);
    if (sink.buf == NULL)
        return NULL;
    /* decoded, a string is never longer than its text (quotes included): no overflow */
    if (scan_string(&p, &sink) < 0 || sink.overflow || p.pos != p.len)
        *why = "not a valid string";
    else if (sink.nul)
        *why = "a NUL character";
    else if (sink.lone_surrogate)
        *why = "a lone surrogate";
    else {
        sink.buf[sink.len] = '\0';
        return sink.buf;
    }
    free(sink.buf);
    return NULL;
}
