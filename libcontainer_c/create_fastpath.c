/*
 * The runtime shim's `create` of a GPU container without Python: config.json edited from the create
 * cache. Included by runtime_passthrough.c.
 *
 * The first create of a request runs Python, which resolves the request, picks the mode, builds the
 * edits and writes config.json; in `cdi` and `legacy` mode it also writes a create cache entry
 * (runtime_shim/create_cache.py): the request's key, what the edits depended on (spec dirs and files,
 * the host device nodes, the prestart hook: stat identities) and the edits as JSON texts, ready to
 * insert. A later create whose config.json gives the same key, with every recorded identity unchanged,
 * is done here: the key is built from config.json by the rules the runtime cache lists (the same rules
 * Python narrowed the request's view of config.json to, so the key decides the request by
 * construction), the edits are applied with cdi.apply's list semantics, config.json is replaced
 * atomically as bundle_spec.write_spec does, and the runtime is exec'd.
 *
 * Nothing here decides anything Python would decide differently: whatever is not plain (a backslash in
 * config.json, a member of the wrong type, a repeated key, an unexpected shape, a stale identity, a
 * leftover temp file, any error) means "Python decides", with config.json untouched. Python still
 * runs for every error and warning, so messages come from one place.
 */
#include <dirent.h>
#include <sys/random.h>

#include "json.h"

#define CREATE_CACHE_MAGIC "gct-create-cache 1"
#define CREATE_CACHE_MAX (1 << 20)
#define CREATE_MAX_BRACKETS 256   /* cdi.oci_config.MAX_DEPTH: more brackets than that, Python walks */
#define CREATE_KEY_MAX 65536

struct buf {
    char *data;
    size_t len, cap;
    int failed;
};

static void buf_add(struct buf *b, const char *s, size_t n)
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

static void buf_str(struct buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

/* ---- walking a document json_scan validated, which holds no backslash ---- */

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

static size_t skip_ws(const struct doc *doc, size_t i)
{
    while (i < doc->n && (doc->d[i] == ' ' || doc->d[i] == '\t' || doc->d[i] == '\n' || doc->d[i] == '\r'))
        i++;
    return i;
}

/* The end of the value starting at i (no escapes: a string ends at the next quote). */
static size_t value_end(const struct doc *doc, size_t i)
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

static char kind(const struct doc *doc, struct span v)
{
    return v.start == v.end ? 0 : doc->d[v.start];
}

static int absent(const struct doc *doc, struct span v)
{
    return kind(doc, v) == 0 || kind(doc, v) == 'n';   /* null is absent, as for Go and cdi.apply */
}

static void items_free(struct items *it)
{
    free(it->key);
    free(it->val);
    it->key = it->val = NULL;
    it->n = 0;
}

/* The members (or elements) of the object (or array) v. -1: out of memory, or a key repeated (which
 * value counts is then a question for Python). */
static int items_of(const struct doc *doc, struct span v, struct items *out)
{
    memset(out, 0, sizeof(*out));
    int object = kind(doc, v) == '{';
    size_t cap = 0, i = skip_ws(doc, v.start + 1);
    if (doc->d[i] == (object ? '}' : ']'))
        return 0;
    for (;;) {
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

static int span_is(const struct doc *doc, struct span s, const char *text)
{
    size_t len = strlen(text);
    return s.end - s.start == len && memcmp(doc->d + s.start, text, len) == 0;
}

/* The member key of object v (absent span if none, or v not an object). -1: a key repeated. */
static int member(const struct doc *doc, struct span v, const char *key, struct span *out)
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
static struct span inner(struct span s)
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

/* ---- the create cache and the rules of the key ---- */

/* Calls fn for every "<key> <value>" line of text (value without the newline); stops at fn's nonzero. */
static int each_line(const char *text, const char *key, int (*fn)(void *, const char *, size_t), void *arg)
{
    size_t len = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t line_len = end ? (size_t)(end - line) : strlen(line);
        if (line_len > len && strncmp(line, key, len) == 0 && line[len] == ' ') {
            int r = fn(arg, line + len + 1, line_len - len - 1);
            if (r)
                return r;
        }
        line = end ? end + 1 : NULL;
    }
    return 0;
}

struct text_match {
    const char *text;
    size_t len;
    int exact;   /* 1: equal; 0: text starts with the line's value */
};

static int line_matches(void *arg, const char *value, size_t len)
{
    struct text_match *m = arg;
    return m->exact ? len == m->len && memcmp(value, m->text, len) == 0
                    : len <= m->len && memcmp(value, m->text, len) == 0;
}

static int has_line(const char *text, const char *key, const char *value, size_t len, int exact)
{
    struct text_match m = { value, len, exact };
    return each_line(text, key, line_matches, &m);
}

/* Whether text has a line "<key> ..." (or "<key>" alone). */
static int has_key(const char *text, const char *key)
{
    size_t len = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t line_len = end ? (size_t)(end - line) : strlen(line);
        if (line_len >= len && strncmp(line, key, len) == 0 && (line_len == len || line[len] == ' '))
            return 1;
        line = end ? end + 1 : NULL;
    }
    return 0;
}

/* An env entry the request is read from: key-env-name (exact) or key-env-prefix. */
static int relevant_env(const char *rules, const char *entry, size_t len)
{
    const char *eq = memchr(entry, '=', len);
    size_t name_len = eq ? (size_t)(eq - entry) : len;
    return has_line(rules, "key-env-name", entry, name_len, 1) || has_line(rules, "key-env-prefix", entry, name_len, 0);
}

static void key_line(struct buf *key, const char *what, const char *a, size_t a_len, const char *b, size_t b_len)
{
    buf_str(key, what);
    buf_add(key, " ", 1);
    buf_add(key, a, a_len);
    if (b) {
        buf_add(key, "\t", 1);
        buf_add(key, b, b_len);
    }
    buf_add(key, "\n", 1);
}

/* The request's key (runtime_shim/create_cache.py key_lines, the same lines in the same order). */
static int request_key(const struct doc *doc, struct span top, const char *rules, const char *program,
                       const char *self, char **envp, struct buf *key)
{
    static const char *const environ_keys[] = { "NVIDIA_CTK_CONFIG_FILE_PATH", "XDG_CONFIG_HOME", "NVIDIA_CTK_CACHE_DIR",
                                                "NVIDIA_CTK_DRIVER_ROOT", "NVIDIA_CTK_CDI_CACHE_FILE", NULL };
    key_line(key, "program", program, strlen(program), NULL, 0);
    key_line(key, "exe", self, strlen(self), NULL, 0);
    for (const char *const *k = environ_keys; *k; k++) {
        const char *value = nonempty(env_value(envp, *k));
        if (value) {
            buf_str(key, "environ ");
            buf_str(key, *k);
            buf_add(key, "=", 1);
            buf_str(key, value);
            buf_add(key, "\n", 1);
        }
    }
    struct span process, env, caps, bounding, user, uid, gid, annotations, mounts;
    if (member(doc, top, "process", &process) || member(doc, process, "env", &env) ||
        member(doc, process, "capabilities", &caps) || member(doc, caps, "bounding", &bounding) ||
        member(doc, process, "user", &user) || member(doc, user, "uid", &uid) || member(doc, user, "gid", &gid) ||
        member(doc, top, "annotations", &annotations) || member(doc, top, "mounts", &mounts))
        return -1;
    struct items it;
    if (kind(doc, env) == '[') {
        if (items_of(doc, env, &it))
            return -1;
        for (size_t i = 0; i < it.n; i++) {
            struct span s = inner(it.val[i]);
            if (relevant_env(rules, doc->d + s.start, s.end - s.start))
                key_line(key, "env", doc->d + s.start, s.end - s.start, NULL, 0);
        }
        items_free(&it);
    }
    if (kind(doc, annotations) == '{') {
        if (items_of(doc, annotations, &it))
            return -1;
        for (size_t i = 0; i < it.n; i++) {
            struct span k = it.key[i], v = inner(it.val[i]);
            if (has_line(rules, "key-annotation-prefix", doc->d + k.start, k.end - k.start, 0))
                key_line(key, "annotation", doc->d + k.start, k.end - k.start, doc->d + v.start, v.end - v.start);
        }
        items_free(&it);
    }
    if (kind(doc, mounts) == '[') {
        if (items_of(doc, mounts, &it))
            return -1;
        int bad = 0;
        for (size_t i = 0; !bad && i < it.n; i++) {
            struct span dest, source;
            bad = member(doc, it.val[i], "destination", &dest) || member(doc, it.val[i], "source", &source);
            if (bad || kind(doc, dest) != '"')
                continue;
            dest = inner(dest);
            if (!has_line(rules, "key-mount-prefix", doc->d + dest.start, dest.end - dest.start, 0))
                continue;
            if (kind(doc, source) == '"') {
                source = inner(source);
                key_line(key, "mount", doc->d + dest.start, dest.end - dest.start, doc->d + source.start,
                         source.end - source.start);
            } else {
                key_line(key, "mount", doc->d + dest.start, dest.end - dest.start, NULL, 0);
            }
        }
        items_free(&it);
        if (bad)
            return -1;
    }
    int privileged = 0;
    if (kind(doc, bounding) == '[') {
        if (items_of(doc, bounding, &it))
            return -1;
        for (size_t i = 0; i < it.n; i++)
            privileged |= span_is(doc, it.val[i], "\"CAP_SYS_ADMIN\"");
        items_free(&it);
    }
    key_line(key, "privileged", privileged ? "1" : "0", 1, NULL, 0);
    buf_str(key, "user ");
    buf_add(key, absent(doc, uid) ? "-" : doc->d + uid.start, absent(doc, uid) ? 1 : uid.end - uid.start);
    buf_add(key, " ", 1);
    buf_add(key, absent(doc, gid) ? "-" : doc->d + gid.start, absent(doc, gid) ? 1 : gid.end - gid.start);
    buf_add(key, "\n", 1);
    return key->failed || key->len > CREATE_KEY_MAX ? -1 : 0;
}

/* The cache's "key" lines, each with its newline, are exactly the key. */
static int key_is(const char *cache, const struct buf *key)
{
    size_t at = 0;
    for (const char *line = cache; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t line_len = end ? (size_t)(end - line) : strlen(line);
        if (line_len >= 4 && strncmp(line, "key ", 4) == 0) {
            size_t len = line_len - 4;
            if (at + len + 1 > key->len || memcmp(key->data + at, line + 4, len) != 0 || key->data[at + len] != '\n')
                return 0;
            at += len + 1;
        }
        line = end ? end + 1 : NULL;
    }
    return at == key->len;
}

/* "check <dev> <ino> <size> <mtime_ns> <ctime_ns> <mode> <rdev> <path>" still true of stat(path);
 * "absent <path>": still ENOENT. */
static int check_still_true(void *arg, const char *value, size_t len)
{
    (void)arg;
    char line[PATH_MAX + 256];
    if (len >= sizeof(line))
        return 1;
    memcpy(line, value, len);
    line[len] = '\0';
    unsigned long long dev, ino, mode, rdev;
    long long size, mtime, ctime;
    int path_at = 0;
    if (sscanf(line, "%llu %llu %lld %lld %lld %llu %llu %n", &dev, &ino, &size, &mtime, &ctime, &mode, &rdev,
               &path_at) != 7 || !path_at)
        return 1;
    struct stat st;
    if (stat(line + path_at, &st) != 0)
        return 1;
    return !(st.st_dev == dev && st.st_ino == ino && st.st_size == size &&
             (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec == mtime &&
             (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec == ctime &&
             st.st_mode == mode && st.st_rdev == rdev);
}

static int absent_still(void *arg, const char *value, size_t len)
{
    (void)arg;
    char path[PATH_MAX];
    if (len >= sizeof(path))
        return 1;
    memcpy(path, value, len);
    path[len] = '\0';
    struct stat st;
    return !(stat(path, &st) != 0 && errno == ENOENT);
}

/* ---- the edits, applied as cdi.apply applies them ---- */

struct entry {
    const char *text;    /* the JSON text to write */
    size_t len;
    const char *match;   /* what dedups it: an env name, a device path, a mount destination (unquoted) */
    size_t match_len;
    int depth;           /* mounts: their destination's depth */
};

struct entries {
    struct entry *e;
    size_t n, cap;
    int failed;
};

static void entries_add(struct entries *list, struct entry e)
{
    if (list->failed)
        return;
    if (list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 32;
        struct entry *grown = realloc(list->e, cap * sizeof(*grown));
        if (!grown) {
            list->failed = 1;
            return;
        }
        list->e = grown;
        list->cap = cap;
    }
    list->e[list->n++] = e;
}

static void entries_remove(struct entries *list, const char *match, size_t len)
{
    size_t kept = 0;
    for (size_t i = 0; i < list->n; i++)
        if (!(list->e[i].match && list->e[i].match_len == len && memcmp(list->e[i].match, match, len) == 0))
            list->e[kept++] = list->e[i];
    list->n = kept;
}

static void entries_write(struct buf *out, const struct entries *list)
{
    buf_add(out, "[", 1);
    for (size_t i = 0; i < list->n; i++) {
        if (i)
            buf_add(out, ",", 1);
        buf_add(out, list->e[i].text, list->e[i].len);
    }
    buf_add(out, "]", 1);
}

/* The number of parts of os.path.normpath(path) (cdi.apply._path_depth). */
static int path_depth(const char *path, size_t len)
{
    int absolute = len > 0 && path[0] == '/', n = 0, dots = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && path[j] != '/')
            j++;
        size_t part = j - i;
        if (part == 0 || (part == 1 && path[i] == '.')) {
            /* nothing */
        } else if (part == 2 && path[i] == '.' && path[i + 1] == '.') {
            if (absolute) {
                if (n > 0)
                    n--;
            } else if (n == dots) {
                n++;
                dots++;
            } else {
                n--;
            }
        } else {
            n++;
        }
        i = j + 1;
    }
    return n > 0 || absolute ? n : 1;
}

/* The cache's lines of one kind, "<kind> <match>\t<json>" (or "<kind> <json>" for rules; env: the match is
 * the name in the JSON string). */
struct edit_lines {
    struct entries *list;
    int with_match, env;
};

static int add_edit_line(void *arg, const char *value, size_t len)
{
    struct edit_lines *e = arg;
    struct entry entry = { value, len, NULL, 0, 0 };
    if (e->with_match) {
        const char *tab = memchr(value, '\t', len);
        if (!tab)
            return 1;
        entry.match = value;
        entry.match_len = (size_t)(tab - value);
        entry.text = tab + 1;
        entry.len = len - entry.match_len - 1;
    } else if (e->env) {
        if (len < 2 || value[0] != '"')
            return 1;
        const char *eq = memchr(value + 1, '=', len - 2);
        entry.match = value + 1;
        entry.match_len = eq ? (size_t)(eq - value - 1) : len - 2;
    }
    entries_add(e->list, entry);
    return 0;
}

/* The existing items of a list member as entries; match: the item's own text inside quotes (env, as
 * strings), or a member of it (device "path", mount "destination"). */
static int existing(const struct doc *doc, struct span list, const char *match_member, struct entries *out)
{
    if (absent(doc, list))
        return 0;
    struct items it;
    if (items_of(doc, list, &it))
        return -1;
    for (size_t i = 0; i < it.n; i++) {
        struct entry e = { doc->d + it.val[i].start, it.val[i].end - it.val[i].start, NULL, 0, 0 };
        if (!match_member) {   /* env: the variable's name */
            struct span s = inner(it.val[i]);
            const char *eq = memchr(doc->d + s.start, '=', s.end - s.start);
            e.match = doc->d + s.start;
            e.match_len = eq ? (size_t)(eq - e.match) : s.end - s.start;
        } else if (match_member[0]) {
            struct span m;
            if (member(doc, it.val[i], match_member, &m)) {
                items_free(&it);
                return -1;
            }
            if (kind(doc, m) == 'n' && strcmp(match_member, "destination") == 0) {
                items_free(&it);
                return -1;   /* cdi.apply would fail on it: Python says so */
            }
            if (kind(doc, m) == '"') {
                e.match = doc->d + m.start + 1;
                e.match_len = m.end - m.start - 2;
            }
        }
        entries_add(out, e);
    }
    items_free(&it);
    return out->failed ? -1 : 0;
}

struct apply {
    const struct doc *doc;
    const char *cache;
    int drop_nvidia_prestart;
    const char *hook_name;   /* for hook_list */
};

/* A member rewriter: writes the new value of a member (present: v, maybe null; absent: v empty) into
 * out. Returns REWRITE_WROTE; REWRITE_KEEP (nothing written: an absent member stays absent, a present
 * one as it is); REWRITE_DELETE (the member goes); -1 on failure. */
enum { REWRITE_KEEP = 0, REWRITE_WROTE = 1, REWRITE_DELETE = 2 };
typedef int (*member_writer)(struct apply *a, struct span v, struct buf *out);

struct rewrite {
    const char *key;
    member_writer write;
};

/* The object v (absent or null: a new one) with the named members rewritten, every other member kept
 * as it is written. Returns as a member_writer. */
static int rewrite_object(struct apply *a, struct span v, const struct rewrite *rw, size_t nrw, struct buf *out)
{
    const struct doc *doc = a->doc;
    struct items it = { 0 };
    if (kind(doc, v) == '{' && items_of(doc, v, &it))
        return -1;
    int done[8] = { 0 }, first = 1;
    buf_add(out, "{", 1);
    for (size_t i = 0; i < it.n; i++) {
        size_t r = 0;
        while (r < nrw && !span_is(doc, it.key[i], rw[r].key))
            r++;
        size_t mark = out->len;
        if (!first)
            buf_add(out, ",", 1);
        buf_add(out, doc->d + it.key[i].start - 1, it.key[i].end - it.key[i].start + 2);
        buf_add(out, ":", 1);
        int w = REWRITE_KEEP;
        if (r < nrw) {
            done[r] = 1;
            w = rw[r].write(a, it.val[i], out);
        }
        if (w < 0) {
            items_free(&it);
            return -1;
        }
        if (w == REWRITE_DELETE) {
            out->len = mark;
            continue;
        }
        if (w == REWRITE_KEEP)
            buf_add(out, doc->d + it.val[i].start, it.val[i].end - it.val[i].start);
        first = 0;
    }
    items_free(&it);
    for (size_t r = 0; r < nrw; r++) {
        if (done[r])
            continue;
        size_t mark = out->len;
        if (!first)
            buf_add(out, ",", 1);
        buf_add(out, "\"", 1);
        buf_str(out, rw[r].key);
        buf_add(out, "\":", 2);
        int w = rw[r].write(a, (struct span){ 0, 0 }, out);
        if (w < 0)
            return -1;
        if (w != REWRITE_WROTE) {
            out->len = mark;
            continue;
        }
        first = 0;
    }
    buf_add(out, "}", 1);
    return out->failed ? -1 : REWRITE_WROTE;
}

static int write_env(struct apply *a, struct span v, struct buf *out)
{
    struct entries list = { 0 }, adds = { 0 };
    struct edit_lines lines = { &adds, 0, 1 };
    int r = -1;
    if (existing(a->doc, v, NULL, &list) || each_line(a->cache, "env", add_edit_line, &lines) || adds.failed)
        goto out;
    for (size_t i = 0; i < adds.n; i++) {   /* cdi.apply.apply_env: replace the last of that name, else append */
        size_t j = list.n;
        while (j > 0 && !(list.e[j - 1].match_len == adds.e[i].match_len &&
                          memcmp(list.e[j - 1].match, adds.e[i].match, adds.e[i].match_len) == 0))
            j--;
        if (j > 0)
            list.e[j - 1] = adds.e[i];
        else
            entries_add(&list, adds.e[i]);
    }
    entries_write(out, &list);
    r = list.failed ? -1 : 1;
out:
    free(list.e);
    free(adds.e);
    return r;
}

static int write_process(struct apply *a, struct span v, struct buf *out)
{
    static const struct rewrite rw[] = { { "env", write_env } };
    return rewrite_object(a, v, rw, 1, out);
}

static int write_devices(struct apply *a, struct span v, struct buf *out)
{
    struct entries list = { 0 }, adds = { 0 };
    struct edit_lines lines = { &adds, 1, 0 };
    int r = -1;
    if (existing(a->doc, v, "path", &list) || each_line(a->cache, "device", add_edit_line, &lines) || adds.failed)
        goto out;
    for (size_t i = 0; i < adds.n; i++) {   /* apply_device_nodes: the one of that path goes, the new one last */
        entries_remove(&list, adds.e[i].match, adds.e[i].match_len);
        entries_add(&list, adds.e[i]);
    }
    entries_write(out, &list);
    r = list.failed ? -1 : 1;
out:
    free(list.e);
    free(adds.e);
    return r;
}

static int write_rules(struct apply *a, struct span v, struct buf *out)
{
    struct entries list = { 0 };
    struct edit_lines lines = { &list, 0, 0 };
    int r = -1;
    if (existing(a->doc, v, "", &list) || each_line(a->cache, "rule", add_edit_line, &lines))
        goto out;
    entries_write(out, &list);
    r = list.failed ? -1 : 1;
out:
    free(list.e);
    return r;
}

static int write_resources(struct apply *a, struct span v, struct buf *out)
{
    if (!has_key(a->cache, "rule"))
        return REWRITE_KEEP;
    static const struct rewrite rw[] = { { "devices", write_rules } };
    return rewrite_object(a, v, rw, 1, out);
}

static int write_linux(struct apply *a, struct span v, struct buf *out)
{
    static const struct rewrite rw[] = { { "devices", write_devices }, { "resources", write_resources } };
    return rewrite_object(a, v, rw, 2, out);
}

static int write_mounts(struct apply *a, struct span v, struct buf *out)
{
    struct entries list = { 0 }, adds = { 0 };
    struct edit_lines lines = { &adds, 1, 0 };
    int r = -1;
    if (existing(a->doc, v, "destination", &list) || each_line(a->cache, "mount", add_edit_line, &lines) ||
        adds.failed)
        goto out;
    for (size_t i = 0; i < adds.n; i++) {   /* apply_mounts: the one of that destination goes, the new one last */
        entries_remove(&list, adds.e[i].match, adds.e[i].match_len);
        entries_add(&list, adds.e[i]);
    }
    if (list.failed)
        goto out;
    for (size_t i = 0; i < list.n; i++)   /* a mount without a destination sorts as "" does: depth 1 */
        list.e[i].depth = list.e[i].match ? path_depth(list.e[i].match, list.e[i].match_len) : 1;
    for (size_t i = 1; i < list.n; i++) {   /* stable: parents before children, equal depths in order */
        struct entry e = list.e[i];
        size_t j = i;
        while (j > 0 && list.e[j - 1].depth > e.depth) {
            list.e[j] = list.e[j - 1];
            j--;
        }
        list.e[j] = e;
    }
    entries_write(out, &list);
    r = 1;
out:
    free(list.e);
    free(adds.e);
    return r;
}

/* runtime_shim.modes._is_nvidia_hook: the path's or args[0]'s base name is the legacy hook's. */
static int is_nvidia_hook(const struct doc *doc, struct span hook)
{
    static const char name[] = "nvidia-container-runtime-hook";
    struct span path, args, first = { 0, 0 };
    if (member(doc, hook, "path", &path) || member(doc, hook, "args", &args))
        return -1;
    struct items it;
    if (kind(doc, args) == '[') {
        if (items_of(doc, args, &it))
            return -1;
        if (it.n)
            first = it.val[0];
        items_free(&it);
    }
    struct span both[2] = { path, first };
    for (int k = 0; k < 2; k++) {
        if (kind(doc, both[k]) != '"')
            continue;
        struct span s = inner(both[k]);
        const char *base = doc->d + s.start;
        for (const char *p = base; p < doc->d + s.end; p++)
            if (*p == '/')
                base = p + 1;
        if ((size_t)(doc->d + s.end - base) == sizeof(name) - 1 && memcmp(base, name, sizeof(name) - 1) == 0)
            return 1;
    }
    return 0;
}

struct hook_lines {
    const char *name;
    struct entries *list;
};

static int add_hook_line(void *arg, const char *value, size_t len)
{
    struct hook_lines *h = arg;
    const char *tab = memchr(value, '\t', len);
    if (!tab)
        return 1;
    if ((size_t)(tab - value) == strlen(h->name) && memcmp(value, h->name, strlen(h->name)) == 0)
        entries_add(h->list, (struct entry){ tab + 1, len - (size_t)(tab - value) - 1, NULL, 0, 0 });
    return 0;
}

static int write_hook_list(struct apply *a, struct span v, struct buf *out)
{
    const struct doc *doc = a->doc;
    struct entries list = { 0 };
    struct hook_lines lines = { a->hook_name, &list };
    int r = -1;
    if (!absent(doc, v)) {   /* existing hooks: match marks them (only they can be judged below) */
        struct items it;
        if (items_of(doc, v, &it))
            return -1;
        for (size_t i = 0; i < it.n; i++)
            entries_add(&list, (struct entry){ doc->d + it.val[i].start, it.val[i].end - it.val[i].start,
                                               doc->d + it.val[i].start, 0, 0 });
        items_free(&it);
    }
    size_t before = list.n;
    if (each_line(a->cache, "hook", add_hook_line, &lines) || list.failed)
        goto out;
    int changed = list.n != before;
    if (strcmp(a->hook_name, "prestart") == 0 && a->drop_nvidia_prestart) {   /* modes.drop_legacy_hooks */
        size_t kept = 0;
        for (size_t i = 0; i < list.n; i++) {
            int nvidia = 0;
            if (list.e[i].match) {
                struct span s = { (size_t)(list.e[i].text - doc->d), (size_t)(list.e[i].text - doc->d) + list.e[i].len };
                if ((nvidia = is_nvidia_hook(doc, s)) < 0)
                    goto out;
            }
            if (!nvidia)
                list.e[kept++] = list.e[i];
        }
        if (kept != list.n) {
            list.n = kept;
            if (kept == 0) {
                r = REWRITE_DELETE;   /* del hooks["prestart"] */
                goto out;
            }
            changed = 1;
        }
    }
    if (!changed) {
        r = REWRITE_KEEP;
        goto out;
    }
    entries_write(out, &list);
    r = list.failed ? -1 : REWRITE_WROTE;
out:
    free(list.e);
    return r;
}

#define HOOK_WRITER(fn, hook)                                        \
    static int fn(struct apply *a, struct span v, struct buf *out)  \
    {                                                                \
        a->hook_name = hook;                                         \
        return write_hook_list(a, v, out);                           \
    }
HOOK_WRITER(write_prestart, "prestart")
HOOK_WRITER(write_create_runtime, "createRuntime")
HOOK_WRITER(write_create_container, "createContainer")
HOOK_WRITER(write_start_container, "startContainer")
HOOK_WRITER(write_poststart, "poststart")
HOOK_WRITER(write_poststop, "poststop")

static int write_hooks(struct apply *a, struct span v, struct buf *out)
{
    static const struct rewrite rw[] = { { "prestart", write_prestart }, { "createRuntime", write_create_runtime },
                                         { "createContainer", write_create_container },
                                         { "startContainer", write_start_container },
                                         { "poststart", write_poststart }, { "poststop", write_poststop } };
    if (absent(a->doc, v) && !has_key(a->cache, "hook"))
        return REWRITE_KEEP;
    return rewrite_object(a, v, rw, 6, out);
}

/* Whether the prestart hooks already hold the legacy hook (runtime_shim.modes.apply_legacy: then the
 * spec stays as it is). -1: cannot tell. */
static int has_nvidia_prestart(const struct doc *doc, struct span top)
{
    struct span hooks, prestart;
    if (member(doc, top, "hooks", &hooks) || member(doc, hooks, "prestart", &prestart))
        return -1;
    if (kind(doc, prestart) != '[')
        return 0;
    struct items it;
    if (items_of(doc, prestart, &it))
        return -1;
    int found = 0;
    for (size_t i = 0; !found && i < it.n; i++)
        found = is_nvidia_hook(doc, it.val[i]);
    items_free(&it);
    return found;
}

/* The edited document: doc's text with the members the edits touch rewritten. */
static int apply_cached_edits(const struct doc *doc, struct span top, const char *cache, struct buf *out)
{
    struct apply a = { doc, cache, has_key(cache, "drop-nvidia-prestart"), NULL };
    struct rewrite rw[4];
    size_t n = 0;
    if (has_key(cache, "env"))
        rw[n++] = (struct rewrite){ "process", write_process };
    if (has_key(cache, "device"))
        rw[n++] = (struct rewrite){ "linux", write_linux };
    if (has_key(cache, "mount"))
        rw[n++] = (struct rewrite){ "mounts", write_mounts };
    if (has_key(cache, "hook") || a.drop_nvidia_prestart)
        rw[n++] = (struct rewrite){ "hooks", write_hooks };
    return rewrite_object(&a, top, rw, n, out) < 0 || out->failed ? -1 : 0;
}

/* ---- config.json replaced as runtime_shim.bundle_spec.write_spec does ---- */

static int is_temp_name(const char *name)
{
    static const char prefix[] = ".config.json.", suffix[] = ".tmp";
    size_t len = strlen(name);
    return len > sizeof(prefix) + sizeof(suffix) - 2 && strncmp(name, prefix, sizeof(prefix) - 1) == 0 &&
           strcmp(name + len - (sizeof(suffix) - 1), suffix) == 0;
}

/* Any temp file of a writer in the bundle (maybe a dead one's: Python removes those). */
static int bundle_has_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 1;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)))
        found = is_temp_name(e->d_name);
    closedir(d);
    return found;
}

static int write_config(const char *dir, const char *path, const struct stat *was, const struct buf *data)
{
    char tmp[PATH_MAX];
    unsigned char token[4];
    if (getrandom(token, sizeof(token), 0) != sizeof(token))
        return -1;
    int n = snprintf(tmp, sizeof(tmp), "%s/.config.json.%d.%02x%02x%02x%02x.tmp", dir, (int)getpid(), token[0],
                     token[1], token[2], token[3]);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    struct stat mine, named;
    int ok = lockf(fd, F_LOCK, 0) == 0 && fstat(fd, &mine) == 0 && lstat(tmp, &named) == 0 &&
             named.st_ino == mine.st_ino;
    for (size_t done = 0; ok && done < data->len;) {
        ssize_t w = write(fd, data->data + done, data->len - done);
        ok = w > 0;
        done += ok ? (size_t)w : 0;
    }
    ok = ok && fchmod(fd, was->st_mode & 07777) == 0 &&
         ((was->st_uid == geteuid() && was->st_gid == getegid()) || fchown(fd, was->st_uid, was->st_gid) == 0) &&
         fsync(fd) == 0 && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    close(fd);
    if (!ok)
        return -1;
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
        fsync(dir_fd);
        close(dir_fd);
    }
    return 0;
}

/* ---- the whole fast path ---- */

/* The cache file for this key, if it is ours (read_cache's rules) and for this config. */
static char *read_create_cache(const char *dir, const char *config, const char *identity, const struct buf *key)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/create-%016llx-%016llx.cache", dir, (unsigned long long)fnv1a64(config),
                     (unsigned long long)fnv1a64(key->data));
    if (n < 0 || (size_t)n >= sizeof(path))
        return NULL;
    char *text = malloc(CREATE_CACHE_MAX);
    if (!text || read_cache(path, text, CREATE_CACHE_MAX) < 0 ||
        strncmp(text, CREATE_CACHE_MAGIC "\n", strlen(CREATE_CACHE_MAGIC) + 1) != 0 ||
        !has_line(text, "config", config, strlen(config), 1) || !has_line(text, "identity", identity, strlen(identity), 1) ||
        !key_is(text, key)) {
        free(text);
        return NULL;
    }
    return text;
}

/*
 * Edit the bundle's config.json from the create cache. 0: done (config.json written, or in legacy mode
 * already holding the hook), the runtime may be exec'd; -1: Python decides (nothing was changed).
 * rules: the runtime cache's text (key-* lines); cache_dir, config, identity: as checked by the caller.
 */
static int create_from_cache(const char *program, const char *self, const char *bundle, const char *rules,
                             const char *cache_dir, const char *config, const char *identity, char **envp,
                             const char **mode_out)
{
    char dir[PATH_MAX], path[PATH_MAX];
    int n = snprintf(dir, sizeof(dir), "%s", bundle && bundle[0] ? bundle : ".");
    if (n < 0 || (size_t)n >= sizeof(dir) || snprintf(path, sizeof(path), "%s/config.json", dir) >= (int)sizeof(path))
        return -1;
    if (!has_key(rules, "key-env-prefix"))
        return -1;   /* a runtime cache without the key's rules (an older writer) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    struct stat st;
    struct doc doc = { NULL, 0 };
    struct buf key = { 0 }, out = { 0 };
    char *cache = NULL, *data = NULL;
    int result = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > SHIM_SPEC_SCAN_MAX)
        goto done;
    data = malloc((size_t)st.st_size + 1);
    size_t total = 0;
    ssize_t got;
    while (data && total < (size_t)st.st_size && (got = read(fd, data + total, (size_t)st.st_size - total)) > 0)
        total += (size_t)got;
    if (!data || total != (size_t)st.st_size || memchr(data, '\\', total))
        goto done;
    data[total] = '\0';
    size_t brackets = 0;
    for (size_t i = 0; i < total; i++)
        brackets += data[i] == '[' || data[i] == '{';
    struct json_error jerr;
    enum json_type top_type;
    if (brackets > CREATE_MAX_BRACKETS || json_scan(data, total, NULL, 0, &top_type, &jerr) != 0 ||
        top_type != JSON_OBJECT)
        goto done;
    doc = (struct doc){ data, total };
    size_t start = skip_ws(&doc, 0);
    struct span top = { start, value_end(&doc, start) };
    if (!shape_ok(&doc, top, &S_TOP) || request_key(&doc, top, rules, program, self, envp, &key) != 0)
        goto done;
    cache = read_create_cache(cache_dir, config, identity, &key);
    if (!cache || each_line(cache, "check", check_still_true, NULL) || each_line(cache, "absent", absent_still, NULL))
        goto done;
    *mode_out = has_line(cache, "mode", "legacy", 6, 1) ? "legacy" : "cdi";
    if (has_key(cache, "unless-nvidia-prestart")) {
        int present = has_nvidia_prestart(&doc, top);
        if (present < 0)
            goto done;
        if (present) {
            result = 0;   /* the hook is there already: config.json stays as it is */
            goto done;
        }
    }
    if (apply_cached_edits(&doc, top, cache, &out) != 0 || bundle_has_temp_files(dir))
        goto done;
    struct stat now;
    if (lstat(path, &now) != 0 || !S_ISREG(now.st_mode) || now.st_ino != st.st_ino)
        goto done;
    result = write_config(dir, path, &now, &out);
done:
    close(fd);
    free(data);
    free(cache);
    free(key.data);
    free(out.data);
    return result;
}
