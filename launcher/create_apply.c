/*
 * The create fast path's edits: config.json rewritten member by
 * member where the cached edits touch it (process.env, linux.devices and resources.devices, mounts,
 * hooks), every other byte kept, with cdi.apply's list semantics: an env variable replaced where it
 * stands or appended, a device node or mount replacing the one of the same path, mounts stably sorted by
 * depth, hooks appended, and runtime_shim.modes' handling of the legacy prestart hook. The tests hold the
 * result to Python's on random documents (tests/unit/runtime_shim/test_create_cache.py).
 */
#include <stdlib.h>
#include <string.h>

#include "cache_file.h"
#include "create_apply.h"
#include "json.h"
#include "text_buf.h"

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

/* cdi.apply's rule for device nodes and mounts: each added one replaces every one of its path, last. */
static void entries_replace(struct entries *list, const struct entries *adds)
{
    for (size_t i = 0; i < adds->n; i++) {
        entries_remove(list, adds->e[i].match, adds->e[i].match_len);
        entries_add(list, adds->e[i]);
    }
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
static int existing(const struct json_doc *doc, struct json_span list, const char *match_member, struct entries *out)
{
    if (json_absent(doc, list))
        return 0;
    struct json_items it;
    if (json_items_of(doc, list, &it))
        return -1;
    for (size_t i = 0; i < it.n; i++) {
        struct entry e = { doc->d + it.val[i].start, it.val[i].end - it.val[i].start, NULL, 0, 0 };
        if (!match_member) {   /* env: the variable's name */
            struct json_span s = json_inner(it.val[i]);
            const char *eq = memchr(doc->d + s.start, '=', s.end - s.start);
            e.match = doc->d + s.start;
            e.match_len = eq ? (size_t)(eq - e.match) : s.end - s.start;
        } else if (match_member[0]) {
            struct json_span m;
            if (json_member(doc, it.val[i], match_member, &m)) {
                json_items_free(&it);
                return -1;
            }
            if (json_kind(doc, m) == 'n' && strcmp(match_member, "destination") == 0) {
                json_items_free(&it);
                return -1;   /* cdi.apply would fail on it: Python says so */
            }
            if (json_kind(doc, m) == '"') {
                e.match = doc->d + m.start + 1;
                e.match_len = m.end - m.start - 2;
            }
        }
        entries_add(out, e);
    }
    json_items_free(&it);
    return out->failed ? -1 : 0;
}

struct apply {
    const struct json_doc *doc;
    const char *cache;
    int drop_nvidia_prestart;
    const char *hook_name;   /* for hook_list */
};

/* A member rewriter: writes the new value of a member (present: v, maybe null; absent: v empty) into
 * out. Returns REWRITE_WROTE; REWRITE_KEEP (nothing written: an absent member stays absent, a present
 * one as it is); REWRITE_DELETE (the member goes); -1 on failure. */
enum { REWRITE_KEEP = 0, REWRITE_WROTE = 1, REWRITE_DELETE = 2 };
typedef int (*member_writer)(struct apply *a, struct json_span v, struct buf *out);

struct rewrite {
    const char *key;
    member_writer write;
};

/* The object v (absent or null: a new one) with the named members rewritten, every other member kept
 * as it is written. Returns as a member_writer. */
static int rewrite_object(struct apply *a, struct json_span v, const struct rewrite *rw, size_t nrw, struct buf *out)
{
    const struct json_doc *doc = a->doc;
    struct json_items it = { 0 };
    if (json_kind(doc, v) == '{' && json_items_of(doc, v, &it))
        return -1;
    int done[8] = { 0 }, first = 1;
    buf_add(out, "{", 1);
    for (size_t i = 0; i < it.n; i++) {
        size_t r = 0;
        while (r < nrw && !json_span_is(doc, it.key[i], rw[r].key))
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
            json_items_free(&it);
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
    json_items_free(&it);
    for (size_t r = 0; r < nrw; r++) {
        if (done[r])
            continue;
        size_t mark = out->len;
        if (!first)
            buf_add(out, ",", 1);
        buf_add(out, "\"", 1);
        buf_str(out, rw[r].key);
        buf_add(out, "\":", 2);
        int w = rw[r].write(a, (struct json_span){ 0, 0 }, out);
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

static int write_env(struct apply *a, struct json_span v, struct buf *out)
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

static int write_process(struct apply *a, struct json_span v, struct buf *out)
{
    static const struct rewrite rw[] = { { "env", write_env } };
    return rewrite_object(a, v, rw, 1, out);
}

/* The list v with the cache's line_key edits: each replaces every item whose member has its path, and
 * goes last (cdi.apply's rule for device nodes and mounts). -1: failure (list freed by the caller). */
static int replaced(struct apply *a, struct json_span v, const char *member, const char *line_key, struct entries *list)
{
    struct entries adds = { 0 };
    struct edit_lines lines = { &adds, 1, 0 };
    int r = existing(a->doc, v, member, list) || each_line(a->cache, line_key, add_edit_line, &lines) || adds.failed
                ? -1
                : 0;
    if (r == 0)
        entries_replace(list, &adds);
    free(adds.e);
    return r || list->failed ? -1 : 0;
}

static int write_devices(struct apply *a, struct json_span v, struct buf *out)
{
    struct entries list = { 0 };
    int r = replaced(a, v, "path", "device", &list) ? -1 : REWRITE_WROTE;   /* apply_device_nodes */
    if (r > 0)
        entries_write(out, &list);
    free(list.e);
    return r;
}

static int write_rules(struct apply *a, struct json_span v, struct buf *out)
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

static int write_resources(struct apply *a, struct json_span v, struct buf *out)
{
    if (!has_key(a->cache, "rule"))
        return REWRITE_KEEP;
    static const struct rewrite rw[] = { { "devices", write_rules } };
    return rewrite_object(a, v, rw, 1, out);
}

static int write_linux(struct apply *a, struct json_span v, struct buf *out)
{
    static const struct rewrite rw[] = { { "devices", write_devices }, { "resources", write_resources } };
    return rewrite_object(a, v, rw, 2, out);
}

static int write_mounts(struct apply *a, struct json_span v, struct buf *out)
{
    struct entries list = { 0 };
    int r = -1;
    if (replaced(a, v, "destination", "mount", &list))   /* apply_mounts, then the sort */
        goto out;
    for (size_t i = 0; i < list.n; i++)   /* a mount without a destination sorts as "" does: depth 1 */
        list.e[i].depth = list.e[i].match ? path_depth(list.e[i].match, list.e[i].match_len) : 1;
    /* stable: parents before children, equal depths in order. An insertion sort: the config.json it
     * came from has at most CREATE_MAX_BRACKETS objects, so at most that many mounts plus the edits' */
    for (size_t i = 1; i < list.n; i++) {
        struct entry e = list.e[i];
        size_t j = i;
        while (j > 0 && list.e[j - 1].depth > e.depth) {
            list.e[j] = list.e[j - 1];
            j--;
        }
        list.e[j] = e;
    }
    entries_write(out, &list);
    r = REWRITE_WROTE;
out:
    free(list.e);
    return r;
}

/* runtime_shim.modes._is_nvidia_hook: the path's or args[0]'s base name is the legacy hook's. */
static int is_nvidia_hook(const struct json_doc *doc, struct json_span hook)
{
    static const char name[] = "nvidia-container-runtime-hook";
    struct json_span path, args, first = { 0, 0 };
    if (json_member(doc, hook, "path", &path) || json_member(doc, hook, "args", &args))
        return -1;
    struct json_items it;
    if (json_kind(doc, args) == '[') {
        if (json_items_of(doc, args, &it))
            return -1;
        if (it.n)
            first = it.val[0];
        json_items_free(&it);
    }
    struct json_span both[2] = { path, first };
    for (int k = 0; k < 2; k++) {
        if (json_kind(doc, both[k]) != '"')
            continue;
        struct json_span s = json_inner(both[k]);
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

static int write_hook_list(struct apply *a, struct json_span v, struct buf *out)
{
    const struct json_doc *doc = a->doc;
    struct entries list = { 0 };
    struct hook_lines lines = { a->hook_name, &list };
    int r = -1;
    if (!json_absent(doc, v)) {   /* existing hooks: match marks them (only they can be judged below) */
        struct json_items it;
        if (json_items_of(doc, v, &it))
            return -1;
        for (size_t i = 0; i < it.n; i++)
            entries_add(&list, (struct entry){ doc->d + it.val[i].start, it.val[i].end - it.val[i].start,
                                               doc->d + it.val[i].start, 0, 0 });
        json_items_free(&it);
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
                size_t start = (size_t)(list.e[i].text - doc->d);
                struct json_span s = { start, start + list.e[i].len };
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
    static int fn(struct apply *a, struct json_span v, struct buf *out)  \
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

static int write_hooks(struct apply *a, struct json_span v, struct buf *out)
{
    static const struct rewrite rw[] = { { "prestart", write_prestart }, { "createRuntime", write_create_runtime },
                                         { "createContainer", write_create_container },
                                         { "startContainer", write_start_container },
                                         { "poststart", write_poststart }, { "poststop", write_poststop } };
    if (json_absent(a->doc, v) && !has_key(a->cache, "hook"))
        return REWRITE_KEEP;
    return rewrite_object(a, v, rw, 6, out);
}

/* Whether the prestart hooks already hold the legacy hook (runtime_shim.modes.apply_legacy: then the
 * spec stays as it is). -1: cannot tell. */
int has_nvidia_prestart(const struct json_doc *doc, struct json_span top)
{
    struct json_span hooks, prestart;
    if (json_member(doc, top, "hooks", &hooks) || json_member(doc, hooks, "prestart", &prestart))
        return -1;
    if (json_kind(doc, prestart) != '[')
        return 0;
    struct json_items it;
    if (json_items_of(doc, prestart, &it))
        return -1;
    int found = 0;
    for (size_t i = 0; !found && i < it.n; i++)
        found = is_nvidia_hook(doc, it.val[i]);
    json_items_free(&it);
    return found;
}

/* The edited document: doc's text with the members the edits touch rewritten. */
int apply_cached_edits(const struct json_doc *doc, struct json_span top, const char *cache, struct buf *out)
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
