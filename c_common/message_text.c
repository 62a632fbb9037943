/* Outside values made fit for a message line, as the Python programs make them (cdi/errors.py, the
 * twin: docs/c-twins.md): repr()'s quoting and escapes, str.isprintable()'s idea of what must be
 * escaped, and the bounds of cdi.errors.bounded, to the character. Shared by nvidia-cdi-hook (every
 * line it writes) and the launcher (its own error lines: text_print_line). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "message_text.h"

/* The code point of the UTF-8 sequence at s (its length in *len), or -1 for a byte that starts no
 * valid sequence (overlong, surrogate, beyond U+10FFFF, truncated). */
static long utf8_decode(const unsigned char *s, size_t *len)
{
    static const long min[] = { 0, 0, 0x80, 0x800, 0x10000 };
    size_t n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    long cp;

    if (n == 0 || s[0] >= 0xf5)
        return -1;
    cp = s[0] & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *len = n;
    return cp;
}

/* Python's str.isprintable() for a non-ASCII code point (Unicode 14, Python 3.11): C1 controls,
 * spaces other than ' ', format characters (bidi overrides, zero-width ones, BOM, tags ...) and
 * private use are not printable. Unassigned code points, which Python escapes too, are shown as
 * they are: a table of them would be most of this program. */
static int py_printable(long cp)
{
    static const long ranges[][2] = {
        { 0x80, 0xa0 }, { 0xad, 0xad }, { 0x600, 0x605 }, { 0x61c, 0x61c }, { 0x6dd, 0x6dd },
        { 0x70f, 0x70f }, { 0x1680, 0x1680 }, { 0x180e, 0x180e }, { 0x2000, 0x200f },
        { 0x2028, 0x202f }, { 0x205f, 0x2064 }, { 0x2066, 0x206f }, { 0x3000, 0x3000 },
        { 0xd800, 0xdfff },
        { 0xe000, 0xf8ff }, { 0xfeff, 0xfeff }, { 0xfff9, 0xfffb }, { 0xfffe, 0xffff },
        { 0x890, 0x891 }, { 0x8e2, 0x8e2 }, { 0x110bd, 0x110bd }, { 0x110cd, 0x110cd }, { 0x13430, 0x13438 },
        { 0x1bca0, 0x1bca3 }, { 0x1d173, 0x1d17a }, { 0xe0001, 0xe0001 }, { 0xe0020, 0xe007f },
        { 0xf0000, 0x10ffff },
    };
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
        if (cp >= ranges[i][0] && cp <= ranges[i][1])
            return 0;
    return 1;
}

struct out {
    char *buf;
    size_t size, len;
};

/* Appends; the buffer is sized for the worst case (text_repr), so nothing is ever cut. */
static void put(struct out *o, const char *text, size_t n)
{
    if (o->len + n + 1 > o->size)
        n = o->size > o->len + 1 ? o->size - o->len - 1 : 0;
    memcpy(o->buf + o->len, text, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

/* One character of a repr: escapes as Python's unicode_repr writes them. quote 0: not inside quotes,
 * only what is not printable is escaped (a quote or a backslash stays as it is). */
static void put_char(struct out *o, long cp, const unsigned char *raw, size_t rawlen, char quote)
{
    char esc[24];   /* room for any long in hex: -Wformat-truncation cannot see cp <= 0x10ffff */

    if (quote && (cp == quote || cp == '\\'))
        snprintf(esc, sizeof(esc), "\\%c", (char)cp);
    else if (cp == '\t' || cp == '\n' || cp == '\r')
        snprintf(esc, sizeof(esc), "\\%c", cp == '\t' ? 't' : cp == '\n' ? 'n' : 'r');
    else if (cp < 0x20 || cp == 0x7f)
        snprintf(esc, sizeof(esc), "\\x%02lx", cp);
    else if (cp < 0x7f || py_printable(cp)) {
        put(o, (const char *)raw, rawlen);
        return;
    } else if (cp <= 0xff)
        snprintf(esc, sizeof(esc), "\\x%02lx", cp);
    else if (cp <= 0xffff)
        snprintf(esc, sizeof(esc), "\\u%04lx", cp);
    else
        snprintf(esc, sizeof(esc), "\\U%08lx", cp);
    put(o, esc, strlen(esc));
}

/* text with escapes as repr() writes them, between quotes unless quote is 0; malloc'd */
static char *escaped(const char *text, char quote)
{
    const unsigned char *s = (const unsigned char *)text;
    /* the longest escape per input byte: an undecodable byte as a 6-character surrogate escape */
    struct out o = { NULL, 6 * strlen(text) + 3, 0 };

    o.buf = malloc(o.size);
    if (o.buf == NULL)
        return NULL;
    o.buf[0] = '\0';
    if (quote)
        put(&o, &quote, 1);
    while (*s) {
        size_t n = 1;
        long cp = *s < 0x80 ? *s : utf8_decode(s, &n);
        if (cp < 0)   /* an undecodable byte: Python's argv holds it as a surrogate escape */
            cp = 0xdc00 + *s, n = 1;
        put_char(&o, cp, s, n, quote);
        s += n;
    }
    if (quote)
        put(&o, &quote, 1);
    return o.buf;
}

char *text_repr(const char *text)
{
    return escaped(text, strchr(text, '\'') && !strchr(text, '"') ? '"' : '\'');
}

char *text_printable(const char *text)
{
    return escaped(text, 0);
}

void text_make_printable(char *text)
{
    unsigned char *r = (unsigned char *)text;
    char *w = text;

    while (*r) {
        size_t n = 1;
        long cp = *r < 0x80 ? *r : utf8_decode(r, &n);   /* n stays 1 for a byte that is not UTF-8 */
        if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && !py_printable(cp))) {
            *w++ = '?';
        } else {
            memmove(w, r, n);
            w += n;
        }
        r += n;
    }
    *w = '\0';
}

char *text_oserror(int errnum, const char *path)
{
    char *quoted = text_repr(path), *text;

    if (quoted == NULL || asprintf(&text, "[Errno %d] %s: %s", errnum, strerror(errnum), quoted) < 0)
        text = NULL;
    free(quoted);
    return text;
}

/* The <where> of an error line: as it is when printable, else quoted (cdi.errors.shown). */
char *text_shown(const char *where)
{
    char *text = text_printable(where);

    if (text == NULL || strcmp(text, where) == 0)
        return text;
    free(text);
    return text_repr(where);
}

/* cdi.errors.MAX_DIGITS, MAX_WORD, MAX_TEXT: characters of a number, of another run without a space,
 * of the whole text */
enum { MAX_DIGITS = 32, MAX_WORD = 256, MAX_TEXT = 4096 };

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The byte offset of character k of the UTF-8 text s (n bytes), n when it has fewer. */
static size_t char_offset(const char *s, size_t n, size_t k)
{
    size_t i = 0;

    for (; i < n; i++)
        if ((s[i] & 0xc0) != 0x80 && k-- == 0)
            return i;
    return n;
}

/* s[0..n) cut in place to limit characters around "...", keeping its start and its last quarter
 * (cdi.errors._cut); returns the new length. */
static size_t cut(char *s, size_t n, size_t limit)
{
    size_t tail = limit / 4, chars = 0, head_end, tail_start;

    for (size_t i = 0; i < n; i++)
        chars += (s[i] & 0xc0) != 0x80;
    if (chars <= limit)
        return n;
    head_end = char_offset(s, n, limit - 3 - tail);
    tail_start = char_offset(s, n, chars - tail);
    memcpy(s + head_end, "...", 3);
    memmove(s + head_end + 3, s + tail_start, n - tail_start);
    return head_end + 3 + n - tail_start;
}

/* Every run of more than MAX_DIGITS digits in the word s[0..n) cut in place; returns the new length. */
static size_t cut_numbers(char *s, size_t n)
{
    size_t r = 0, w = 0;

    while (r < n) {
        size_t end = r;

        while (end < n && is_digit(s[end]))
            end++;
        if (end == r) {
            s[w++] = s[r++];
            continue;
        }
        memmove(s + w, s + r, end - r);
        w += cut(s + w, end - r, MAX_DIGITS);
        r = end;
    }
    return w;
}

/* text (printable already) bounded in place as cdi.errors.bounded bounds it: each number to
 * MAX_DIGITS characters, each other run without a space to MAX_WORD, the whole to MAX_TEXT. */
void text_bound(char *text)
{
    size_t len = strlen(text), r = 0, w = 0;

    for (;;) {
        size_t end = r, n;

        while (end < len && text[end] != ' ')
            end++;
        n = end - r;
        memmove(text + w, text + r, n);
        w += cut(text + w, cut_numbers(text + w, n), MAX_WORD);
        if (end >= len)
            break;
        text[w++] = ' ';
        r = end + 1;
    }
    text[cut(text, w, MAX_TEXT)] = '\0';
}

void text_print_line(const char *program, const char *level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    text_vprint_line(program, level, fmt, ap);
    va_end(ap);
}

void text_vprint_line(const char *program, const char *level, const char *fmt, va_list ap)
{
    char *text = NULL, *line = NULL, *name = text_printable(program);

    if (vasprintf(&text, fmt, ap) < 0)
        text = NULL;
    if (text)
        line = text_printable(text);
    if (line)
        text_bound(line);
    if (name)
        text_bound(name);
    fprintf(stderr, "%s: %s: %s\n", name ? name : "?", level, line ? line : "out of memory");
    free(line);
    free(text);
    free(name);
}
