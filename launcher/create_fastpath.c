/*
 * The runtime shim's `create` of a GPU container without Python: config.json edited from the create
 * cache (runtime_passthrough.c calls it).
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
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache_file.h"
#include "config_shape.h"
#include "create_apply.h"
#include "create_fastpath.h"
#include "json.h"
#include "text_buf.h"

#define CREATE_CACHE_MAGIC "gct-create-cache 2"
#define CREATE_CACHE_MAX (1 << 20)
#define CREATE_KEY_MAX 65536

/* ---- the create cache and the rules of the key ---- */

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

struct environ_line {
    char **envp;
    struct buf *key;
};

/* A key-environ rule: "environ NAME=value" when the caller set NAME (not empty). */
static int environ_key_line(void *arg, const char *name, size_t len)
{
    struct environ_line *e = arg;
    char wanted[128];
    if (value_cstr(name, len, wanted, sizeof(wanted)))
        return 1;
    const char *value = nonempty(env_value(e->envp, wanted));
    if (value) {
        buf_str(e->key, "environ ");
        buf_str(e->key, wanted);
        buf_add(e->key, "=", 1);
        buf_str(e->key, value);
        buf_add(e->key, "\n", 1);
    }
    return 0;
}

/* The request's key (runtime_shim/create_cache.py key_lines, the same lines in the same order; the
 * caller's variables it holds are the runtime cache's key-environ rules). */
static int request_key(const struct json_doc *doc, struct json_span top, const char *rules, const char *program,
                       const char *self, char **envp, struct buf *key)
{
    key_line(key, "program", program, strlen(program), NULL, 0);
    key_line(key, "exe", self, strlen(self), NULL, 0);
    struct environ_line environ_lines = { envp, key };
    if (each_line(rules, "key-environ", environ_key_line, &environ_lines))
        return -1;
    struct json_span process, env, caps, bounding, user, uid, gid, annotations, mounts;
    if (json_member(doc, top, "process", &process) || json_member(doc, process, "env", &env) ||
        json_member(doc, process, "capabilities", &caps) || json_member(doc, caps, "bounding", &bounding) ||
        json_member(doc, process, "user", &user) || json_member(doc, user, "uid", &uid) ||
        json_member(doc, user, "gid", &gid) ||
        json_member(doc, top, "annotations", &annotations) || json_member(doc, top, "mounts", &mounts))
        return -1;
    struct json_items it;
    if (json_kind(doc, env) == '[') {
        if (json_items_of(doc, env, &it))
            return -1;
        for (size_t i = 0; i < it.n; i++) {
            struct json_span s = json_inner(it.val[i]);
            if (relevant_env(rules, doc->d + s.start, s.end - s.start))
                key_line(key, "env", doc->d + s.start, s.end - s.start, NULL, 0);
        }
        json_items_free(&it);
    }
    if (json_kind(doc, annotations) == '{') {
        if (json_items_of(doc, annotations, &it))
            return -1;
        for (size_t i = 0; i < it.n; i++) {
            struct json_span k = it.key[i], v = json_inner(it.val[i]);
            if (has_line(rules, "key-annotation-prefix", doc->d + k.start, k.end - k.start, 0))
                key_line(key, "annotation", doc->d + k.start, k.end - k.start, doc->d + v.start, v.end - v.start);
        }
        json_items_free(&it);
    }
    if (json_kind(doc, mounts) == '[') {
        if (json_items_of(doc, mounts, &it))
            return -1;
        int bad = 0;
        for (size_t i = 0; !bad && i < it.n; i++) {
            struct json_span dest, source;
            bad = json_member(doc, it.val[i], "destination", &dest) || json_member(doc, it.val[i], "source", &source);
            if (bad || json_kind(doc, dest) != '"')
                continue;
            dest = json_inner(dest);
            if (!has_line(rules, "key-mount-prefix", doc->d + dest.start, dest.end - dest.start, 0))
                continue;
            if (json_kind(doc, source) == '"') {
                source = json_inner(source);
                key_line(key, "mount", doc->d + dest.start, dest.end - dest.start, doc->d + source.start,
                         source.end - source.start);
            } else {
                key_line(key, "mount", doc->d + dest.start, dest.end - dest.start, NULL, 0);
            }
        }
        json_items_free(&it);
        if (bad)
            return -1;
    }
    int privileged = 0;
    if (json_kind(doc, bounding) == '[') {
        if (json_items_of(doc, bounding, &it))
            return -1;
        for (size_t i = 0; i < it.n; i++)
            privileged |= json_span_is(doc, it.val[i], "\"CAP_SYS_ADMIN\"");
        json_items_free(&it);
    }
    key_line(key, "privileged", privileged ? "1" : "0", 1, NULL, 0);
    buf_str(key, "user ");
    buf_add(key, json_absent(doc, uid) ? "-" : doc->d + uid.start, json_absent(doc, uid) ? 1 : uid.end - uid.start);
    buf_add(key, " ", 1);
    buf_add(key, json_absent(doc, gid) ? "-" : doc->d + gid.start, json_absent(doc, gid) ? 1 : gid.end - gid.start);
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
    if (value_cstr(value, len, line, sizeof(line)))
        return 1;
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
             ns_of(st.st_mtim) == mtime && ns_of(st.st_ctim) == ctime &&
             st.st_mode == mode && st.st_rdev == rdev);
}

static int absent_still(void *arg, const char *value, size_t len)
{
    (void)arg;
    char path[PATH_MAX];
    if (value_cstr(value, len, path, sizeof(path)))
        return 1;
    struct stat st;
    return !(stat(path, &st) != 0 && errno == ENOENT);
}

/* jit-cdi's answers of the driver root (cdi.driver_files_cache, written by create_cache.answer_line):
 * "lstat <mode> <dev> <ino> <size> <mtime_ns> <ctime_ns> <path>" (full) and "lstat-dir <mode> <dev> <ino>
 * <path>" (a directory only walked through) no longer what lstat(path) gives. */
static int lstat_answer_changed(const char *value, size_t len, int full)
{
    char line[PATH_MAX + 256];
    if (value_cstr(value, len, line, sizeof(line)))
        return 1;
    unsigned long long mode, dev, ino;
    long long size = 0, mtime = 0, ctime = 0;
    int path_at = 0;
    int fields = full ? sscanf(line, "%llu %llu %llu %lld %lld %lld %n", &mode, &dev, &ino, &size, &mtime, &ctime,
                               &path_at)
                      : sscanf(line, "%llu %llu %llu %n", &mode, &dev, &ino, &path_at);
    struct stat st;
    if (fields != (full ? 6 : 3) || !path_at || lstat(line + path_at, &st) != 0)
        return 1;
    if (st.st_mode != mode || st.st_dev != dev || st.st_ino != ino)
        return 1;
    return full && !(st.st_size == size && ns_of(st.st_mtim) == mtime && ns_of(st.st_ctim) == ctime);
}

static int lstat_changed(void *arg, const char *value, size_t len)
{
    (void)arg;
    return lstat_answer_changed(value, len, 1);
}

static int lstat_dir_changed(void *arg, const char *value, size_t len)
{
    (void)arg;
    return lstat_answer_changed(value, len, 0);
}

/* "lstat-absent <path>": lstat(path) no longer says missing (cdi.driver_root.MISSING_ERRNOS). */
static int lstat_absent_changed(void *arg, const char *value, size_t len)
{
    (void)arg;
    char path[PATH_MAX];
    if (value_cstr(value, len, path, sizeof(path)))
        return 1;
    struct stat st;
    return !(lstat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR || errno == ENAMETOOLONG));
}

static int root_answers_changed(const char *cache)
{
    return each_line(cache, "lstat", lstat_changed, NULL) || each_line(cache, "lstat-dir", lstat_dir_changed, NULL) ||
           each_line(cache, "lstat-absent", lstat_absent_changed, NULL);
}

static int add_inventory_line(void *arg, const char *value, size_t len)
{
    buf_add(arg, value, len);
    buf_add(arg, "\n", 1);
    return 0;
}

/*
 * jit-cdi: whether the driver still answers what the entry's edits were made of. NVML is a library the
 * static launcher cannot load, so the entry's nvml-helper (gct-nvml-inventory, dynamic) reads it with
 * the same calls as cdi.nvml and prints the transcript; equal to the entry's "inventory" lines, the
 * inventory is the one Python built the edits from. The helper gets an empty environment and
 * /dev/null for stdin and stderr: any failure of it (no driver, a hang cut by its own timeout) only
 * means Python decides, and Python says what is wrong.
 */
static int inventory_unchanged(const char *cache)
{
    char helper[PATH_MAX], library[PATH_MAX], minors[PATH_MAX], timeout[64];
    if (cache_field(cache, "nvml-helper", helper, sizeof(helper)) || helper[0] != '/' ||
        cache_field(cache, "nvml-library", library, sizeof(library)) ||
        cache_field(cache, "nvml-mig-minors", minors, sizeof(minors)) ||
        cache_field(cache, "nvml-timeout", timeout, sizeof(timeout)))
        return 0;
    struct buf expected = { 0 }, got = { 0 };
    each_line(cache, "inventory", add_inventory_line, &expected);
    int pipe_fds[2], same = 0;
    if (expected.failed || expected.len == 0 || pipe2(pipe_fds, O_CLOEXEC) != 0) {
        free(expected.data);
        return 0;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    char *args[] = { helper, library, minors, timeout, NULL }, *no_env[] = { NULL };
    pid_t pid;
    int spawned = posix_spawn(&pid, helper, &actions, NULL, args, no_env) == 0;
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_fds[1]);
    if (spawned) {
        char chunk[4096];
        ssize_t n;
        /* one byte more than expected is enough to tell them apart; the rest is not read */
        while (!got.failed && got.len <= expected.len &&
               ((n = read(pipe_fds[0], chunk, sizeof(chunk))) > 0 || (n < 0 && errno == EINTR)))
            if (n > 0)
                buf_add(&got, chunk, (size_t)n);
        close(pipe_fds[0]);
        int status = 0;
        pid_t waited;
        while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
            ;
        same = waited == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && !got.failed &&
               got.len == expected.len &&
               memcmp(got.data, expected.data, got.len) == 0;
    } else {
        close(pipe_fds[0]);
    }
    free(expected.data);
    free(got.data);
    return same;
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

/* ---- config.json put back when the runtime then cannot be exec'd ---- */

/* The config.json create_from_cache replaced: its bytes, and the file written in its place. */
static struct {
    char dir[PATH_MAX], path[PATH_MAX];
    struct buf original;
    dev_t dev;
    ino_t ino;
} replaced_config;

/* After a failed exec of the runtime: config.json as it was before create_from_cache (errors roll back
 * what was done), if it is still the file written there; Python then decides on the untouched bundle
 * and says in one line why the runtime cannot be started. */
void create_roll_back(void)
{
    struct stat now;
    if (replaced_config.original.data && lstat(replaced_config.path, &now) == 0 && S_ISREG(now.st_mode) &&
        now.st_dev == replaced_config.dev && now.st_ino == replaced_config.ino)
        write_config(replaced_config.dir, replaced_config.path, &now, &replaced_config.original);
    free(replaced_config.original.data);
    memset(&replaced_config, 0, sizeof(replaced_config));
}

/* Whether the runtime the runtime cache names (rules' "runtime" line) is a regular file we may execute
 * now: one removed or made unexecutable since the cache was written (a path outside PATH has no
 * search-dir line that would see it) must not find config.json edited. The exec can still fail
 * (replaced in between, a missing interpreter): then create_roll_back. */
static int runtime_executable(const char *rules)
{
    char runtime[PATH_MAX];
    struct stat st;
    return cache_field(rules, "runtime", runtime, sizeof(runtime)) == 0 && stat(runtime, &st) == 0 &&
           S_ISREG(st.st_mode) && faccessat(AT_FDCWD, runtime, X_OK, AT_EACCESS) == 0;
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
 * Edit the bundle's config.json (data: its text as read_bundle_config read it, st: its stat) from the
 * create cache. 0: done (config.json written, or in legacy mode already holding the hook), the runtime
 * may be exec'd; -1: Python decides (nothing was changed). rules: the runtime cache's text (key-*
 * lines); cache_dir, config, identity: as checked by the caller.
 */
int create_from_cache(const char *program, const char *self, const char *bundle, const char *data, size_t total,
                      const struct stat *st, const char *rules, const char *cache_dir, const char *config,
                      const char *identity, char **envp, const char **mode_out)
{
    char dir[PATH_MAX], path[PATH_MAX];
    int n = snprintf(dir, sizeof(dir), "%s", bundle && bundle[0] ? bundle : ".");
    if (n < 0 || (size_t)n >= sizeof(dir) || snprintf(path, sizeof(path), "%s/config.json", dir) >= (int)sizeof(path))
        return -1;
    if (!has_key(rules, "key-environ"))
        return -1;   /* a runtime cache without the key's rules (an older writer) */
    struct json_doc doc = { data, total };
    struct buf key = { 0 }, out = { 0 };
    char *cache = NULL;
    int result = -1;
    size_t brackets = 0;
    for (size_t i = 0; i < total; i++)
        brackets += data[i] == '[' || data[i] == '{';
    struct json_error jerr;
    enum json_type top_type;
    if (brackets > CREATE_MAX_BRACKETS || json_scan(data, total, NULL, 0, &top_type, &jerr) != 0 ||
        top_type != JSON_OBJECT)
        goto done;
    size_t start = json_skip_ws(&doc, 0);
    struct json_span top = { start, json_value_end(&doc, start) };
    if (!config_shape_ok(&doc, top) || request_key(&doc, top, rules, program, self, envp, &key) != 0)
        goto done;
    cache = read_create_cache(cache_dir, config, identity, &key);
    if (!cache || each_line(cache, "check", check_still_true, NULL) || each_line(cache, "absent", absent_still, NULL) ||
        root_answers_changed(cache))
        goto done;
    int jit = has_line(cache, "mode", "jit-cdi", 7, 1);
    if (jit && !inventory_unchanged(cache))
        goto done;
    *mode_out = has_line(cache, "mode", "legacy", 6, 1) ? "legacy" : jit ? "jit-cdi" : "cdi";
    if (has_key(cache, "unless-nvidia-prestart")) {
        int present = has_nvidia_prestart(&doc, top);
        if (present < 0)
            goto done;
        if (present) {
            result = 0;   /* the hook is there already: config.json stays as it is */
            goto done;
        }
    }
    if (!runtime_executable(rules) || apply_cached_edits(&doc, top, cache, &out) != 0 || bundle_has_temp_files(dir))
        goto done;
    struct stat now;   /* still the file that was read */
    if (lstat(path, &now) != 0 || !S_ISREG(now.st_mode) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
        goto done;
    struct buf original = { 0 };
    buf_add(&original, data, total);
    if (original.failed || write_config(dir, path, &now, &out) != 0) {
        free(original.data);
        goto done;
    }
    result = 0;
    memcpy(replaced_config.dir, dir, sizeof(dir));
    memcpy(replaced_config.path, path, sizeof(path));
    replaced_config.original = original;
    if (lstat(path, &now) == 0) {   /* ours, renamed there a moment ago */
        replaced_config.dev = now.st_dev;
        replaced_config.ino = now.st_ino;
    }
done:
    free(cache);
    free(key.data);
    free(out.data);
    return result;
}
