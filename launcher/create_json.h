/* create_json.c: config.json as spans of its text, for the create fast path: a document json_scan
 * (c_common/json.h) has validated and that holds no backslash. */
#ifndef GCT_CREATE_JSON_H
#define GCT_CREATE_JSON_H

#include <stddef.h>

/* A growing output text, NUL-terminated; failed: out of memory (every later add is dropped). */
struct buf {
    char *data;
    size_t len, cap;
    int failed;
};

void buf_add(struct buf *b, const char *s, size_t n);
void buf_str(struct buf *b, const char *s);

struct span {
    size_t start, end;   /* a value's text; start == end: absent */
};

struct items {
    struct span *key;    /* objects: the key's text inside its quotes */
    struct span *val;
    size_t n;
};

struct doc {
    const char *d;
    size_t n;
};

/* An object with more members than this goes to Python: the repeated-key check is quadratic, and an
 * image's annotations or labels must not make a create slow. OCI configs have a few dozen at most. */
#define CREATE_MAX_MEMBERS 1024

size_t skip_ws(const struct doc *doc, size_t i);
/* The end of the value starting at i (no escapes: a string ends at the next quote). */
size_t value_end(const struct doc *doc, size_t i);
/* The value's first character ('{', '[', '"', 'n', ...), 0 when absent. */
char kind(const struct doc *doc, struct span v);
/* Absent or null (null is absent, as for Go and cdi.apply). */
int absent(const struct doc *doc, struct span v);
/* The members (or elements) of the object (or array) v. -1: out of memory, a key repeated, or more
 * than CREATE_MAX_MEMBERS members. */
int items_of(const struct doc *doc, struct span v, struct items *out);
void items_free(struct items *it);
int span_is(const struct doc *doc, struct span s, const char *text);
/* The member key of object v (absent span if none, or v not an object). -1: a key repeated. */
int member(const struct doc *doc, struct span v, const char *key, struct span *out);
/* The text inside a string value's quotes. */
struct span inner(struct span s);

/* Whether the document's top value has cdi.oci_config.SHAPE (present members only), every repeated
 * key refused: "plain", or Python walks it. */
int config_shape_ok(const struct doc *doc, struct span top);

#endif
