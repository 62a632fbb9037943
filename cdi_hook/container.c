/* The container the hook works on: the bundle from the OCI state on stdin (`bundle`, else the older
 * `bundlePath`), and the rootfs from the bundle's config.json (`root.path`, relative to the bundle,
 * never to the cwd: runc runs hooks in the rootfs, crun in the bundle). Both files are read with a
 * size limit, config.json without following a symlink in its last component and without blocking
 * (O_NONBLOCK, regular files only: a FIFO there must not hang the container's start). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdi_hook.h"
#include "internal.h"
#include "json.h"

/* "invalid container state: Expecting value: line 1 column 1 (byte 0)" */
static int fail_json(struct hook_error *err, const char *where, const char *kind, const char *doc,
                     const struct json_error *jerr)
{
    size_t line, column;

    json_position(doc, jerr->offset, &line, &column);
    return hook_fail(err, where, "invalid container %s: %s: line %zu column %zu (byte %zu)", kind, jerr->what,
                     line, column, jerr->offset);
}

/* A pid as the state writes it: a plain positive integer (no sign, fraction or exponent). */
static long plain_pid(const char *doc, const struct json_value *v)
{
    long pid = 0;

    if (v->type != JSON_NUMBER || v->end - v->start > 9)
        return 0;
    for (size_t i = v->start; i < v->end; i++) {
        if (doc[i] < '0' || doc[i] > '9')
            return 0;
        pid = pid * 10 + (doc[i] - '0');
    }
    return pid;
}

int hook_parse_state(const char *doc, size_t len, struct hook_state *state, struct hook_error *err)
{
    static const char *const bundle_key[] = { "bundle", NULL }, *const old_key[] = { "bundlePath", NULL },
                             *const pid_key[] = { "pid", NULL }, *const status_key[] = { "status", NULL };
    struct json_query q[4] = { { bundle_key, { 0, 0, 0 }, 0 }, { old_key, { 0, 0, 0 }, 0 },
                               { pid_key, { 0, 0, 0 }, 0 }, { status_key, { 0, 0, 0 }, 0 } };
    struct json_error jerr;
    enum json_type top;
    const char *why;
    char *status;

    memset(state, 0, sizeof(*state));
    if (json_scan(doc, len, q, 4, &top, &jerr) < 0)
        return fail_json(err, "stdin", "state", doc, &jerr);
    if (top != JSON_OBJECT)
        return hook_fail(err, "stdin", "invalid container state: not a JSON object");
    state->pid = plain_pid(doc, &q[2].found);
    if (q[3].found.type == JSON_STRING && (status = json_string(doc, &q[3].found, &why)) != NULL) {
        state->waiting = strcmp(status, "creating") == 0 || strcmp(status, "created") == 0;
        free(status);
    }
    /* Python's `state.get("bundle") or state.get("bundlePath")`: a false bundle gives way */
    const struct json_value *v = json_truthy(doc, len, &q[0].found) ? &q[0].found : &q[1].found;
    if (v->type != JSON_STRING)
        return hook_fail(err, "stdin", "container state has no absolute bundle path");
    char *path = json_string(doc, v, &why);
    if (path == NULL)
        return hook_fail(err, "stdin", "invalid container state: the bundle path holds %s", why);
    if (path[0] != '/') {
        free(path);
        return hook_fail(err, "stdin", "container state has no absolute bundle path");
    }
    state->bundle = path;   /* set on success only: the caller owns nothing otherwise */
    return 0;
}

int hook_read_state(int fd, struct hook_state *state, struct hook_error *err)
{
    char *doc;
    size_t len;
    int rc;

    memset(state, 0, sizeof(*state));
    if (gct_read_bounded(fd, HOOK_MAX_STATE, &doc, &len) < 0)
        return hook_fail(err, "stdin", "cannot read the container state: %s", strerror(errno));
    if (len > HOOK_MAX_STATE)
        rc = hook_fail(err, "stdin", "container state is too large");
    else
        rc = hook_parse_state(doc, len, state, err);
    free(doc);
    return rc;
}

/* crun (1.8 at least; fixed upstream since) hands createRuntime and prestart hooks `"bundle": "/"`
 * when the container has a user namespace and devices: its getcwd() after it left the bundle. The
 * waiting init is still where crun started it, in the bundle: its cwd is the bundle then. */
int hook_fix_root_bundle(struct hook_state *state, struct hook_error *err)
{
    char path[64], cwd[PATH_MAX];
    ssize_t n;

    if (strcmp(state->bundle, "/") != 0 || !state->waiting || state->pid <= 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%ld/cwd", state->pid);
    n = readlink(path, cwd, sizeof(cwd) - 1);
    if (n < 0)
        return hook_fail(err, path, "the container state's bundle is /, and the init's directory cannot be "
                         "read: %s", strerror(errno));
    cwd[n] = '\0';
    if (cwd[0] != '/' || strcmp(cwd, "/") == 0)
        return 0;   /* nothing better: config.json is looked for in / and its absence reported */
    char *bundle = strdup(cwd);
    if (bundle == NULL)
        return hook_fail(err, NULL, "out of memory");
    free(state->bundle);
    state->bundle = bundle;
    return 0;
}

void hook_state_free(struct hook_state *state)
{
    free(state->bundle);
    state->bundle = NULL;
}

int hook_config_root_path(const char *doc, size_t len, const char *where, char **path, struct hook_error *err)
{
    static const char *const root_path[] = { "root", "path", NULL };
    struct json_query q = { root_path, { 0, 0, 0 }, 0 };
    struct json_error jerr;
    enum json_type top;
    const char *why;

    if (json_scan(doc, len, &q, 1, &top, &jerr) < 0)
        return fail_json(err, where, "config", doc, &jerr);
    if (q.found.type != JSON_STRING || q.found.end - q.found.start <= 2)
        return hook_fail(err, where, "container config has no root.path");
    *path = json_string(doc, &q.found, &why);
    if (*path == NULL)
        return hook_fail(err, where, "invalid container config: root.path holds %s", why);
    return 0;
}

/* config.json's content (malloc'd); -1 with err filled in. */
static int read_config(const char *config_path, char **doc, size_t *len, struct hook_error *err)
{
    struct stat st;
    int fd, rc = -1;

    fd = open(config_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return hook_fail(err, config_path, "cannot read the container's config: %s", strerror(errno));
    if (fstat(fd, &st) < 0)
        hook_fail(err, config_path, "cannot read the container's config: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        hook_fail(err, config_path, "container config is not a regular file");
    else if (gct_read_bounded(fd, HOOK_MAX_CONFIG, doc, len) < 0)
        hook_fail(err, config_path, "cannot read the container's config: %s", strerror(errno));
    else if (*len > HOOK_MAX_CONFIG) {
        free(*doc);
        *doc = NULL;
        hook_fail(err, config_path, "container config is too large");
    } else
        rc = 0;
    close(fd);
    return rc;
}

/* The last component written in out[base, w) is "..". */
static int last_is_dotdot(const char *out, size_t base, size_t w)
{
    return w >= base + 2 && out[w - 1] == '.' && out[w - 2] == '.' && (w == base + 2 || out[w - 3] == '/');
}

/* Python's posixpath.normpath in place: "." and empty components go, ".." takes the previous
 * component away (at the root it is dropped), exactly two leading slashes stay two. Lexical, as
 * the Python program computed the rootfs path. */
static void normpath(char *s)
{
    size_t initial = s[0] != '/' ? 0 : (s[1] == '/' && s[2] != '/') ? 2 : 1;
    size_t r = 0, w = initial, ncomp = 0;

    while (s[r]) {
        while (s[r] == '/')
            r++;
        size_t start = r;
        while (s[r] && s[r] != '/')
            r++;
        size_t n = r - start;
        if (n == 0 || (n == 1 && s[start] == '.'))
            continue;
        if (n == 2 && s[start] == '.' && s[start + 1] == '.' && !(initial == 0 && ncomp == 0)
            && !(ncomp > 0 && last_is_dotdot(s, initial, w))) {
            if (ncomp > 0) {   /* drop the last component and its separator */
                while (w > initial && s[w - 1] != '/')
                    w--;
                if (w > initial)
                    w--;
                ncomp--;
            }
            continue;
        }
        if (ncomp > 0)
            s[w++] = '/';
        memmove(s + w, s + start, n);   /* w <= start: the text only ever moves left */
        w += n;
        ncomp++;
    }
    if (w == 0)
        s[w++] = '.';
    s[w] = '\0';
}

char *hook_join_normpath(const char *base, const char *path)
{
    char *joined;

    if (path[0] == '/')
        joined = strdup(path);
    else if (asprintf(&joined, "%s%s%s", base, !base[0] || base[strlen(base) - 1] == '/' ? "" : "/", path) < 0)
        joined = NULL;
    if (joined)
        normpath(joined);
    return joined;
}

int hook_container_rootfs(const char *bundle, const char *container_spec, char **rootfs, struct hook_error *err)
{
    char *config_path = NULL, *doc = NULL, *root_path = NULL;
    size_t len = 0;
    int rc = -1;

    if (container_spec)
        config_path = strdup(container_spec);
    else if (asprintf(&config_path, "%s%sconfig.json", bundle, bundle[strlen(bundle) - 1] == '/' ? "" : "/") < 0)
        config_path = NULL;
    if (config_path == NULL)
        return hook_fail(err, NULL, "out of memory");
    if (read_config(config_path, &doc, &len, err) == 0
        && hook_config_root_path(doc, len, config_path, &root_path, err) == 0) {
        *rootfs = hook_join_normpath(bundle, root_path);
        rc = *rootfs ? 0 : hook_fail(err, NULL, "out of memory");
    }
    free(root_path);
    free(doc);
    free(config_path);
    return rc;
}
