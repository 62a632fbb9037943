/*
 * A document json_scan (json.c) has validated, read as spans of its text: values are [start, end) of the
 * text, objects and arrays are listed item by item. For a document that holds no backslash (the caller
 * checks), so a string is the bytes between two quotes and no value needs decoding. A repeated key is
 * refused here, where json_scan lets the last one count: a reader that must decide as Python decides
 * cannot tell which value Python's caller used, so it declines (the launcher's create fast path then
 * leaves the document to Python).
 */
#include <stdlib.h>
#include <string.h>

#include "json.h"

size_t json_skip_ws(const struct json_doc *doc, size_t i)
{
    while (i < doc->n && (doc->d[i] == ' ' || doc->d[i] == '\t' || doc->d[i] == '\n' || doc->d[i] == '\r'))
        i++;
    return i;
}

/* The end of the value starting at i (no escapes: a string ends at the next quote). */
size_t json_value_end(const struct json_doc *doc, size_t i)
{
    const char *d = doc->d;
    if (d[i] == '"')
        return (size_t)((const char *)memchr(d + i + 1, '"', doc->n - i - 1) - d) + 1;
    if (d[i] == '{' || d[i] == '[') {
        size_t depth = 0;
        for (; i < doc->n; i++) {
            if (d[i] == '"') {
                i = (size_t)((const char *)memchr(d + i + 1, '"', doc->n - i - 1) - d);
            } else if (d[i] == '{' || d[i] == '[') {
                depth++;
            } else if (d[i] == '}' || d[i] == ']') {
                if (--depth == 0)
                    return i + 1;
            }
        }
        return doc->n;
    }
    while (i < doc->n && !strchr(",}] \t\n\r", d[i]))
        i++;
    return i;
}

char json_kind(const struct json_doc *doc, struct json_span v)
{
    return v.start == v.end ? 0 : doc->d[v.start];
}

int json_absent(const struct json_doc *doc, struct json_span v)
{
    return json_kind(doc, v) == 0 || json_kind(doc, v) == 'n';   /* null is absent, as for Go and cdi.apply */
}

void json_items_free(struct json_items *it)
{
    free(it->key);
    free(it->val);
    it->key = it->val = NULL;
    it->n = 0;
}

/* The members (or elements) of the object (or array) v. -1: out of memory, a key repeated (which value
 * counts is then the caller's question), or more than JSON_MAX_MEMBERS members. */
int json_items_of(const struct json_doc *doc, struct json_span v, struct json_items *out)
{
    memset(out, 0, sizeof(*out));
    int object = json_kind(doc, v) == '{';
    size_t cap = 0, i = json_skip_ws(doc, v.start + 1);
    if (doc->d[i] == (object ? '}' : ']'))
        return 0;
    for (;;) {
        if (object && out->n == JSON_MAX_MEMBERS) {
            json_items_free(out);
            return -1;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            struct json_span *k = realloc(out->key, cap * sizeof(*k)), *val;
            if (k)
                out->key = k;
            val = k ? realloc(out->val, cap * sizeof(*val)) : NULL;
            if (!k || !val) {
                json_items_free(out);
                return -1;
            }
            out->val = val;
        }
        if (object) {
            size_t key_end = json_value_end(doc, i);
            out->key[out->n] = (struct json_span){ i + 1, key_end - 1 };
            for (size_t j = 0; j < out->n; j++)
                if (out->key[j].end - out->key[j].start == key_end - 1 - (i + 1) &&
                    memcmp(doc->d + out->key[j].start, doc->d + i + 1, key_end - 1 - (i + 1)) == 0) {
                    json_items_free(out);
                    return -1;
                }
            i = json_skip_ws(doc, json_skip_ws(doc, key_end) + 1);   /* past the colon */
        }
        size_t end = json_value_end(doc, i);
        out->val[out->n++] = (struct json_span){ i, end };
        i = json_skip_ws(doc, end);
        if (doc->d[i] != ',')
            return 0;
        i = json_skip_ws(doc, i + 1);
    }
}

int json_span_is(const struct json_doc *doc, struct json_span s, const char *text)
{
    size_t len = strlen(text);
    return s.end - s.start == len && memcmp(doc->d + s.start, text, len) == 0;
}

/* The member key of object v (absent span if none, or v not an object). -1: a key repeated. */
int json_member(const struct json_doc *doc, struct json_span v, const char *key, struct json_span *out)
{
    *out = (struct json_span){ 0, 0 };
    if (json_kind(doc, v) != '{')
        return 0;
    struct json_items it;
    if (json_items_of(doc, v, &it) != 0)
        return -1;
    for (size_t i = 0; i < it.n; i++)
        if (json_span_is(doc, it.key[i], key))
            *out = it.val[i];
    json_items_free(&it);
    return 0;
}

/* The text inside a string value's quotes. */
struct json_span json_inner(struct json_span s)
{
    return (struct json_span){ s.start + 1, s.end - 1 };
}
