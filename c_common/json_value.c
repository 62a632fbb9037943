/* Reading a value json_scan found: its truth as Python sees it, and where an error is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define NUMBER_DIGITS 800   /* significant digits handed to strtod, plus one sticky digit */
#define EXPONENT_CAP 1000000000L

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* The decimal exponent after [eE] at text[*i], saturated at +-EXPONENT_CAP. */
static long exponent(const char *text, size_t n, size_t *i)
{
    long e = 0;
    int negative = 0;

    if (*i < n && (text[*i] == '+' || text[*i] == '-'))
        negative = text[(*i)++] == '-';
    for (; *i < n && is_digit(text[*i]); (*i)++)
        if (e < EXPONENT_CAP)
            e = e * 10 + (text[*i] - '0');
    return negative ? -e : e;
}

/* Whether a float's text (already valid JSON) is nonzero as a double: json.loads gives a float, and
 * 1e-400 is 0.0 (false) while 1e400 is inf (true). The digits go to strtod normalised and cut to
 * NUMBER_DIGITS, with a sticky 1 for any nonzero digit cut off, so that the rounding, also at the
 * edge of the subnormals, is the one the whole text would get. */
static int float_nonzero(const char *text, size_t n)
{
    char buf[NUMBER_DIGITS + 64];
    size_t i = text[0] == '-', k = 0;
    long idx = 0, point = -1, lead = -1;   /* digit index; digits before the point; first nonzero */
    int sticky = 0;

    for (; i < n && (is_digit(text[i]) || text[i] == '.'); i++) {
        if (text[i] == '.') {
            point = idx;
            continue;
        }
        if (lead < 0 && text[i] != '0')
            lead = idx;
        if (lead >= 0 && k < NUMBER_DIGITS)
            buf[2 + k++] = text[i];
        else if (lead >= 0 && text[i] != '0')
            sticky = 1;
        idx++;
    }
    if (lead < 0)
        return 0;   /* all digits zero */
    if (point < 0)
        point = idx;
    long e = 0;
    if (i < n && (text[i] == 'e' || text[i] == 'E')) {
        i++;
        e = exponent(text, n, &i);
    }
    long magnitude = point - lead + e;   /* the value is 0.<digits from lead> * 10^magnitude */
    if (magnitude < -400)
        return 0;
    if (magnitude > 400)
        return 1;
    buf[0] = '0';
    buf[1] = '.';
    if (sticky)
        buf[2 + k++] = '1';
    snprintf(buf + 2 + k, sizeof(buf) - 2 - k, "e%ld", magnitude);
    return strtod(buf, NULL) != 0.0;
}

static int number_nonzero(const char *text, size_t n)
{
    if (memchr(text, '.', n) || memchr(text, 'e', n) || memchr(text, 'E', n))
        return float_nonzero(text, n);
    for (size_t i = 0; i < n; i++)   /* an int: json.loads makes it a Python int */
        if (text[i] >= '1' && text[i] <= '9')
            return 1;
    return 0;
}

/* Whether the container starting at start has no element. */
static int container_empty(const char *doc, size_t len, size_t start)
{
    size_t i = start + 1;

    while (i < len && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r'))
        i++;
    return i < len && (doc[i] == ']' || doc[i] == '}');
}

int json_truthy(const char *doc, size_t len, const struct json_value *v)
{
    switch (v->type) {
    case JSON_TRUE: return 1;
    case JSON_NUMBER: return number_nonzero(doc + v->start, v->end - v->start);
    case JSON_STRING: return v->end - v->start > 2;
    case JSON_ARRAY:
    case JSON_OBJECT: return !container_empty(doc, len, v->start);
    default: return 0;
    }
}

void json_position(const char *doc, size_t offset, size_t *line, size_t *column)
{
    size_t last = 0;

    *line = 1;
    for (size_t i = 0; i < offset; i++)
        if (doc[i] == '\n')
            (*line)++, last = i + 1;
    *column = offset - last + 1;
}
