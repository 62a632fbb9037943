/*
 * Reading config.json for the create fast path (create_fastpath.c): a
 * document json_scan has validated and that holds no backslash, so a string is the bytes between two
 * quotes. Values are spans of the text; objects and arrays are listed item by item (a repeated key is
 * refused: which one counts is a question for Python); the shape check is cdi.oci_config.SHAPE's, as a
 * check that only says "plain" or "not".
 */
#include <stdlib.h>
#include <string.h>

#include "create_json.h"

void buf_add(struct buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *data = realloc(b->data, cap);
        if (!data) {
            b->failed = 1;
            return;
        }
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void buf_str(struct buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

/* ---- spans ---- */


size_t skip_ws(const struct doc *doc, size_t i)
{
    while (i < doc->n && (doc->d[i] == ' ' || doc->d[i] == '\t' || doc->d[i] == '\n' || doc->d[i] == '\r'))
        i++;
    return i;
}

/* The end of the value starting at i (no escapes: a string ends at the next quote). */
size_t value_end(const struct doc *doc, size_t i)
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

char kind(const struct doc *doc, struct span v)
{
    return v.start == v.end ? 0 : doc->d[v.start];
}

int absent(const struct doc *doc, struct span v)
{
    return kind(doc, v) == 0 || kind(doc, v) == 'n';   /* null is absent, as for Go and cdi.apply */
}

void items_free(struct items *it)
{
    free(it->key);
    free(it->val);
    it->key = it->val = NULL;
    it->n = 0;
}

/* An object with more members than this goes to Python: the repeated-key check below is quadratic, and an
 * image's annotations or labels must not make a create slow. OCI configs have a few dozen at most. */

/* The members (or elements) of the object (or array) v. -1: out of memory, a key repeated (which value
 * counts is then a question for Python), or more than CREATE_MAX_MEMBERS members. */
int items_of(const struct doc *doc, struct span v, struct items *out)
{
    memset(out, 0, sizeof(*out));
    int object = kind(doc, v) == '{';
    size_t cap = 0, i = skip_ws(doc, v.start + 1);
    if (doc->d[i] == (object ? '}' : ']'))
        return 0;
    for (;;) {
        if (object && out->n == CREATE_MAX_MEMBERS) {
            items_free(out);
            return -1;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            struct span *k = realloc(out->key, cap * sizeof(*k)), *val;
            if (k)
                out->key = k;
            val = k ? realloc(out->val, cap * sizeof(*val)) : NULL;
            if (!k || !val) {
                items_free(out);
                return -1;
            }
            out->val = val;
        }
        if (object) {
            size_t key_end = value_end(doc, i);
            out->key[out->n] = (struct span){ i + 1, key_end - 1 };
            for (size_t j = 0; j < out->n; j++)
                if (out->key[j].end - out->key[j].start == key_end - 1 - (i + 1) &&
                    memcmp(doc->d + out->key[j].start, doc->d + i + 1, key_end - 1 - (i + 1)) == 0) {
                    items_free(out);
                    return -1;
                }
            i = skip_ws(doc, skip_ws(doc, key_end) + 1);   /* past the colon */
        }
        size_t end = value_end(doc, i);
        out->val[out->n++] = (struct span){ i, end };
        i = skip_ws(doc, end);
        if (doc->d[i] != ',')
            return 0;
        i = skip_ws(doc, i + 1);
    }
}

int span_is(const struct doc *doc, struct span s, const char *text)
{
    size_t len = strlen(text);
    return s.end - s.start == len && memcmp(doc->d + s.start, text, len) == 0;
}

/* The member key of object v (absent span if none, or v not an object). -1: a key repeated. */
int member(const struct doc *doc, struct span v, const char *key, struct span *out)
{
    *out = (struct span){ 0, 0 };
    if (kind(doc, v) != '{')
        return 0;
    struct items it;
    if (items_of(doc, v, &it) != 0)
        return -1;
    for (size_t i = 0; i < it.n; i++)
        if (span_is(doc, it.key[i], key))
            *out = it.val[i];
    items_free(&it);
    return 0;
}

/* The text inside a string value's quotes. */
struct span inner(struct span s)
{
    return (struct span){ s.start + 1, s.end - 1 };
}

/* ---- config.json's shape: cdi.oci_config.SHAPE, as a check that says only "plain" or "not" ---- */

enum shape_kind { SHAPE_STR, SHAPE_INT, SHAPE_LIST, SHAPE_OBJECT, SHAPE_MAP, SHAPE_ANY_OBJECT };

struct shape;
struct member_shape {
    const char *key;
    const struct shape *shape;
};
struct shape {
    enum shape_kind kind;
    const struct shape *item;              /* lists: every item; maps: every value */
    const struct member_shape *members;    /* objects: NULL-terminated */
};

static const struct shape S_STR = { SHAPE_STR, NULL, NULL }, S_INT = { SHAPE_INT, NULL, NULL };
static const struct shape S_ANY_OBJECT = { SHAPE_ANY_OBJECT, NULL, NULL };
static const struct shape S_STRS = { SHAPE_LIST, &S_STR, NULL }, S_INTS = { SHAPE_LIST, &S_INT, NULL };
static const struct member_shape HOOK_MEMBERS[] = { { "path", &S_STR }, { "args", &S_STRS }, { "env", &S_STRS },
                                                    { "timeout", &S_INT }, { NULL, NULL } };
static const struct shape S_HOOK = { SHAPE_OBJECT, NULL, HOOK_MEMBERS };
static const struct shape S_HOOKS = { SHAPE_LIST, &S_HOOK, NULL };
static const struct member_shape HOOKS_MEMBERS[] = { { "prestart", &S_HOOKS }, { "createRuntime", &S_HOOKS },
                                                     { "createContainer", &S_HOOKS }, { "startContainer", &S_HOOKS },
                                                     { "poststart", &S_HOOKS }, { "poststop", &S_HOOKS },
                                                     { NULL, NULL } };
static const struct member_shape CAPS_MEMBERS[] = { { "bounding", &S_STRS }, { NULL, NULL } };
static const struct shape S_CAPS = { SHAPE_OBJECT, NULL, CAPS_MEMBERS };
static const struct member_shape USER_MEMBERS[] = { { "uid", &S_INT }, { "gid", &S_INT },
                                                    { "additionalGids", &S_INTS }, { NULL, NULL } };
static const struct shape S_USER = { SHAPE_OBJECT, NULL, USER_MEMBERS };
static const struct member_shape PROCESS_MEMBERS[] = { { "env", &S_STRS }, { "capabilities", &S_CAPS },
                                                       { "user", &S_USER }, { NULL, NULL } };
static const struct member_shape MOUNT_MEMBERS[] = { { "destination", &S_STR }, { "source", &S_STR },
                                                     { "type", &S_STR }, { "options", &S_STRS }, { NULL, NULL } };
static const struct shape S_MOUNT = { SHAPE_OBJECT, NULL, MOUNT_MEMBERS };
static const struct member_shape ROOT_MEMBERS[] = { { "path", &S_STR }, { NULL, NULL } };
static const struct member_shape DEVICE_MEMBERS[] = { { "path", &S_STR }, { NULL, NULL } };
static const struct shape S_DEVICE = { SHAPE_OBJECT, NULL, DEVICE_MEMBERS };
static const struct shape S_DEVICES = { SHAPE_LIST, &S_DEVICE, NULL };
static const struct shape S_RULES = { SHAPE_LIST, &S_ANY_OBJECT, NULL };
static const struct member_shape RESOURCES_MEMBERS[] = { { "devices", &S_RULES }, { NULL, NULL } };
static const struct shape S_RESOURCES = { SHAPE_OBJECT, NULL, RESOURCES_MEMBERS };
static const struct member_shape LINUX_MEMBERS[] = { { "devices", &S_DEVICES }, { "resources", &S_RESOURCES },
                                                     { "intelRdt", &S_ANY_OBJECT }, { "netDevices", &S_ANY_OBJECT },
                                                     { NULL, NULL } };
static const struct shape S_PROCESS = { SHAPE_OBJECT, NULL, PROCESS_MEMBERS };
static const struct shape S_MOUNTS = { SHAPE_LIST, &S_MOUNT, NULL };
static const struct shape S_ANNOTATIONS = { SHAPE_MAP, &S_STR, NULL };
static const struct shape S_ROOT = { SHAPE_OBJECT, NULL, ROOT_MEMBERS };
static const struct shape S_HOOKS_TABLE = { SHAPE_OBJECT, NULL, HOOKS_MEMBERS };
static const struct shape S_LINUX = { SHAPE_OBJECT, NULL, LINUX_MEMBERS };
static const struct member_shape TOP_MEMBERS[] = { { "process", &S_PROCESS }, { "mounts", &S_MOUNTS },
                                                   { "annotations", &S_ANNOTATIONS }, { "root", &S_ROOT },
                                                   { "hooks", &S_HOOKS_TABLE }, { "linux", &S_LINUX },
                                                   { NULL, NULL } };
static const struct shape S_TOP = { SHAPE_OBJECT, NULL, TOP_MEMBERS };

/* An integer as json.loads reads one: no fraction, no exponent. */
static int is_int(const struct doc *doc, struct span v)
{
    char c = kind(doc, v);
    if (c != '-' && !(c >= '0' && c <= '9'))
        return 0;
    for (size_t i = v.start; i < v.end; i++)
        if (doc->d[i] == '.' || doc->d[i] == 'e' || doc->d[i] == 'E')
            return 0;
    return 1;
}

/* Whether v has the shape (present members only; null is absent), every repeated key refused. */
static int shape_ok(const struct doc *doc, struct span v, const struct shape *shape)
{
    char c = kind(doc, v);
    switch (shape->kind) {
    case SHAPE_STR:
        return c == '"';
    case SHAPE_INT:
        return is_int(doc, v);
    case SHAPE_ANY_OBJECT:
        return c == '{';
    default:
        break;
    }
    if (c != (shape->kind == SHAPE_LIST ? '[' : '{'))
        return 0;
    struct items it;
    if (items_of(doc, v, &it) != 0)
        return 0;
    int ok = 1;
    for (size_t i = 0; ok && i < it.n; i++) {
        if (shape->kind != SHAPE_OBJECT) {
            ok = shape_ok(doc, it.val[i], shape->item);
            continue;
        }
        for (const struct member_shape *m = shape->members; m->key; m++)
            if (span_is(doc, it.key[i], m->key) && !absent(doc, it.val[i]))
                ok = shape_ok(doc, it.val[i], m->shape);
    }
    items_free(&it);
    return ok;
}

int config_shape_ok(const struct doc *doc, struct span top)
{
    return shape_ok(doc, top, &S_TOP);
}
