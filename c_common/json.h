/* A strict JSON reader (RFC 8259) that validates a whole document and finds a few members in it.
 *
 * The documents are hostile (a bundle's config.json, the state on stdin): the reader never
 * recurses (an explicit stack of JSON_MAX_DEPTH levels, Go's encoding/json limit, so whatever runc
 * reads, this reads), never allocates while scanning, and reads only inside [doc, doc + len).
 * Strings must be valid UTF-8 with valid escapes; nothing but whitespace may follow the value;
 * NaN/Infinity, a BOM, comments and trailing commas are errors.
 *
 * Members are named by a path of object keys from the top ({"root", "path", NULL}). A key that
 * occurs twice in an object: the LAST one counts, as for Python's json.loads and Go's encoding/json,
 * which read the same files (the prestart hook, runc). */
#ifndef GCT_JSON_H
#define GCT_JSON_H

#include <stddef.h>

#define JSON_MAX_DEPTH 10000

enum json_type { JSON_ABSENT = 0, JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json_value {
    enum json_type type;
    size_t start, end;   /* the value's text: doc[start, end) (containers: end unused) */
};

struct json_query {
    const char *const *path;   /* object keys from the top, NULL-terminated (at most 8) */
    struct json_value found;   /* JSON_ABSENT when the document has no such member */
    size_t on_path;            /* the scanner's: how many open containers lie on the path */
};

struct json_error {
    const char *what;   /* "Expecting value", "Invalid \\escape", ... */
    size_t offset;      /* byte offset in the document */
};

/* Validates doc and fills each query's found value. *top: the type of the document's value. Returns
 * 0, or -1 with err filled in. */
int json_scan(const char *doc, size_t len, struct json_query *queries, size_t nqueries, enum json_type *top,
              struct json_error *err);

/* Python's bool() of the value as json.loads would give it (0, 0.0, 1e-999, "", [], {}, null and
 * false are false). */
int json_truthy(const char *doc, size_t len, const struct json_value *v);

/* A string value decoded to UTF-8 and NUL-terminated (malloc'd). NULL with *why set when it holds
 * what no path may hold: a NUL character or a lone surrogate (or memory runs out). */
char *json_string(const char *doc, const struct json_value *v, const char **why);

/* The 1-based line and column (in bytes) of an offset, for messages. */
void json_position(const char *doc, size_t offset, size_t *line, size_t *column);

#endif
