/* The one JSON reader of the C programs (nvidia-cdi-hook and the launcher): json.c validates a whole
 * document strictly (RFC 8259) and finds a few members in it; json_value.c reads those; json_spans.c
 * walks a validated document as spans of its text.
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

/* ---- json_spans.c: a document json_scan accepted, read as spans of its text ----
 * Only for a document that holds no backslash (the caller checks): a string is then the bytes between
 * two quotes and no value needs decoding. Where json_scan lets the last of a repeated key count,
 * json_items_of (and json_member) fail on one: a reader that must decide as Python decides cannot
 * tell which value Python's caller used, so it declines. */

struct json_doc {
    const char *d;
    size_t n;
};

struct json_span {
    size_t start, end;   /* a value's text; start == end: absent */
};

struct json_items {
    struct json_span *key;   /* objects: the key's text inside its quotes */
    struct json_span *val;
    size_t n;
};

/* An object with more members than this is refused by json_items_of: the repeated-key check is
 * quadratic, and an image's annotations or labels must not make a create slow. OCI configs have a few
 * dozen at most. */
#define JSON_MAX_MEMBERS 1024

size_t json_skip_ws(const struct json_doc *doc, size_t i);
/* The end of the value starting at i (no escapes: a string ends at the next quote). */
size_t json_value_end(const struct json_doc *doc, size_t i);
/* The value's first character ('{', '[', '"', 'n', 't', 'f', '-' or a digit), 0 when absent. */
char json_kind(const struct json_doc *doc, struct json_span v);
/* Absent or null (null is absent, as for Go and cdi.apply). */
int json_absent(const struct json_doc *doc, struct json_span v);
/* The members (or elements) of the object (or array) v. -1: out of memory, a key repeated, or more
 * than JSON_MAX_MEMBERS members. */
int json_items_of(const struct json_doc *doc, struct json_span v, struct json_items *out);
void json_items_free(struct json_items *it);
/* Whether the span's text is text. */
int json_span_is(const struct json_doc *doc, struct json_span s, const char *text);
/* The member key of object v (absent span if none, or v not an object). -1: a key repeated. */
int json_member(const struct json_doc *doc, struct json_span v, const char *key, struct json_span *out);
/* The text inside a string value's quotes. */
struct json_span json_inner(struct json_span s);

#endif
