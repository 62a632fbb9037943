/*
 * The runtime shim's fast path, for the nvidia-container-runtime programs (launcher.c calls it).
 *
 * Docker and containerd call the shim for every runtime command (create, start, state, kill, delete,
 * exec ...), and only `create` and `run` need Python. For every other command this file execs the
 * low-level runtime directly with the caller's own argv and environment, so such a call costs one
 * static exec more than calling runc itself.
 *
 * Two questions are answered here without Python, each without a second rule set:
 *   - which subcommand runc will run: the global-level argv rules of runtime_shim/runc_argv.py (Go's
 *     flag package), written once more in C and held to the same table of cases by the tests
 *     (tests/unit/runtime_shim/argv_cases.json);
 *   - which low-level runtime config.toml picks: never read from the TOML here. The Python side
 *     writes what it resolved into a small cache file (runtime_shim/runtime_cache.py), keyed on the
 *     config path, the config file's identity (dev, inode, size, mtime, ctime, or "missing") and the
 *     PATH the runtime is searched in. Anything missing, stale, unreadable, not owned by us or
 *     writable by others, a runtime that is one of our own launchers (launcher_identity.c) and a
 *     runtime that cannot be executed, all mean: start Python, which decides, writes a fresh cache
 *     and execs the runtime itself (or says in one line why it cannot).
 *
 * `create` and `run` of a container that asks for no GPU need no Python either: config.json is left
 * untouched then. The launcher finds the bundle with runc's command-level rules (only the bundle
 * matters: a command line runc refuses reaches runc unchanged either way) and looks for the strings
 * without which no request exists (NVIDIA_VISIBLE_DEVICES, the annotation prefixes, ...: listed in the
 * cache by Python, from the one request resolver and the config). None there: exec the runtime.
 * Any of them, a backslash (a JSON escape could spell one), a file too big to scan or anything
 * unclear: Python decides.
 *
 * When Python does start, the caller's environment is handed over in a memfd (GCT_LAUNCHER_ENVIRON_FD)
 * instead of the process environment, which stays reduced to the allowlist: runc must get the
 * caller's environment (NOTIFY_SOCKET, LISTEN_FDS, XDG_RUNTIME_DIR ...), Python must not.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cache_file.h"
#include "cdi_hook.h"   /* launcher_print_version */
#include "create_fastpath.h"
#include "launcher_identity.h"
#include "message_text.h"
#include "runc_argv.h"
#include "runtime_passthrough.h"

#define SHIM_DEFAULT_CONFIG "/etc/nvidia-container-runtime/config.toml"
#define SHIM_CONFIG_RELATIVE "/nvidia-container-runtime/config.toml"
#define SHIM_DEFAULT_CACHE_DIR "/run/nvidia-container-toolkit"
#define SHIM_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define SHIM_CACHE_MAGIC "gct-runtime-cache 2"
#define SHIM_CACHE_MAX 16384
/* The low-level runtime's path, in its environment: set by both exec paths (here and runtime_shim.main);
 * a shim that finds it in its caller's environment was started again by the runtime it ran (a `runtimes`
 * entry leading back to the shim, a wrapper script exec'ing it): a loop, which Python refuses in one
 * line. Hooks that runc starts may inherit it: other programs, which never look. */
#define SHIM_STARTED_BY_SHIM "GCT_RUNTIME_STARTED_BY_SHIM"

struct marker_scan {
    const char *data;
    size_t len;
    int markers;
};

static int marker_found(void *arg, const char *marker, size_t len)
{
    struct marker_scan *scan = arg;
    scan->markers++;
    return len == 0 || memmem(scan->data, scan->len, marker, len) != NULL;
}

/* Whether config.json (read_bundle_config's text) certainly asks for no GPU: none of the markers (the
 * cache's request-marker lines) occurs in it. A cache without markers says nothing about requests. */
static int asks_for_nothing(const char *data, size_t len, const char *cache_text)
{
    struct marker_scan scan = { data, len, 0 };
    return !each_line(cache_text, "request-marker", marker_found, &scan) && scan.markers > 0;
}

/* The config path by the same rule as cdi.config.config_path, as a plain string. */
static int shim_config_path(char **envp, char *out, size_t size)
{
    const char *explicit_path = nonempty(env_value(envp, "NVIDIA_CTK_CONFIG_FILE_PATH"));
    const char *xdg = nonempty(env_value(envp, "XDG_CONFIG_HOME"));
    int n = explicit_path ? snprintf(out, size, "%s", explicit_path)
            : xdg ? snprintf(out, size, "%s%s", xdg, SHIM_CONFIG_RELATIVE)
                  : snprintf(out, size, "%s", SHIM_DEFAULT_CONFIG);
    return n >= 0 && (size_t)n < size ? 0 : -1;
}

/* "dev ino size mtime_ns ctime_ns", or "missing"; -1 when the config cannot be looked at. */
static int config_identity(const char *path, char *out, size_t size)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? (snprintf(out, size, "missing"), 0) : -1;
    snprintf(out, size, "%llu %llu %lld %lld %lld", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino, (long long)st.st_size,
             ns_of(st.st_mtim), ns_of(st.st_ctim));
    return 0;
}

/* A "search-dir <mtime ns> <dir>" line no longer true (-1: the dir did not exist). */
static int search_dir_changed(void *arg, const char *value, size_t len)
{
    (void)arg;
    char entry[PATH_MAX + 32];
    if (value_cstr(value, len, entry, sizeof(entry)))
        return 1;
    char *dir = strchr(entry, ' ');
    if (!dir)
        return 1;
    *dir++ = '\0';
    char now[32];
    struct stat st;
    if (stat(dir, &st) == 0)
        snprintf(now, sizeof(now), "%lld", ns_of(st.st_mtim));
    else if (errno == ENOENT)
        snprintf(now, sizeof(now), "-1");
    else
        return 1;
    return strcmp(now, entry) != 0;
}

/* Every search-dir line still true: a runtime installed since in a PATH directory changes that
 * directory's mtime, and then Python looks again. */
static int search_dirs_unchanged(const char *text)
{
    return !each_line(text, "search-dir", search_dir_changed, NULL);
}

/* One line in the debug log the config names, in the format the Python side writes. */
static void log_passthrough(const char *log_path, const char *name, const char *command, const char *bundle,
                            const char *runtime, const char *fast_mode)
{
    const char *where = bundle && bundle[0] ? bundle : ".";
    if (strpbrk(command, "\"\\\n") || strpbrk(runtime, "\"\\\n") || strpbrk(where, "\"\\\n"))
        return; /* nothing that would need quoting in a log line */
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd < 0)
        return;
    char stamp[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
    char line[3 * PATH_MAX];
    int n;
    if (fast_mode)
        n = snprintf(line, sizeof(line),
                     "time=\"%s\" level=debug msg=\"%s: '%s' of a GPU container from the create cache (mode %s, bundle %s) "
                     "to %s\"\n", stamp, name, command, fast_mode, where, runtime);
    else if (strcmp(command, "create") == 0 || strcmp(command, "run") == 0)
        n = snprintf(line, sizeof(line),
                     "time=\"%s\" level=debug msg=\"%s: passthrough of '%s' without a GPU request (bundle %s) to %s\"\n",
                     stamp, name, command, where, runtime);
    else
        n = snprintf(line, sizeof(line), "time=\"%s\" level=debug msg=\"%s: passthrough of '%s' to %s\"\n",
                     stamp, name, command, runtime);
    if (n > 0 && (size_t)n < sizeof(line)) {
        ssize_t ignored = write(fd, line, (size_t)n);
        (void)ignored;
    }
    close(fd);
}

/* SHIM_STARTED_BY_SHIM=runtime (first: free it and the array) and the caller's environment, for the
 * runtime; NULL when out of memory. */
static char **runtime_environment(char **envp, const char *runtime)
{
    size_t n = 0;
    while (envp && envp[n])
        n++;
    char **out = calloc(n + 2, sizeof(char *));
    size_t size = strlen(SHIM_STARTED_BY_SHIM) + strlen(runtime) + 2;
    char *marker = malloc(size);
    if (!out || !marker) {
        free(out);
        free(marker);
        return NULL;
    }
    snprintf(marker, size, "%s=%s", SHIM_STARTED_BY_SHIM, runtime);
    out[0] = marker;
    if (n)
        memcpy(out + 1, envp, n * sizeof(char *));
    return out;
}

/* Exec the cached low-level runtime with the caller's argv and environment. Returns only when the
 * cache cannot be trusted or the exec fails: then Python decides. */
static void try_runtime_passthrough(const char *name, const char *self, int argc, char **argv, char **envp)
{
    char config[PATH_MAX], identity[128], cache_path[PATH_MAX], text[SHIM_CACHE_MAX];
    char cached[PATH_MAX], runtime[PATH_MAX], log_path[PATH_MAX];
    if (env_value(envp, SHIM_STARTED_BY_SHIM))
        return; /* started again by the runtime a shim ran: Python says so in one line */
    if (shim_config_path(envp, config, sizeof(config)) != 0)
        return;
    const char *cache_dir = nonempty(env_value(envp, "NVIDIA_CTK_CACHE_DIR"));
    if (cache_dir && cache_dir[0] != '/')
        return; /* relative: no cache at all (runtime_cache.cache_dir), Python decides every call */
    int n = snprintf(cache_path, sizeof(cache_path), "%s/runtime-%016llx.cache",
                     cache_dir ? cache_dir : SHIM_DEFAULT_CACHE_DIR, (unsigned long long)fnv1a64(config));
    if (n < 0 || (size_t)n >= sizeof(cache_path) || read_cache(cache_path, text, sizeof(text)) < 0)
        return;
    if (strncmp(text, SHIM_CACHE_MAGIC "\n", strlen(SHIM_CACHE_MAGIC) + 1) != 0)
        return;
    const char *search_path = nonempty(env_value(envp, "PATH"));
    if (cache_field(text, "config", cached, sizeof(cached)) != 0 || strcmp(cached, config) != 0)
        return;
    if (cache_field(text, "search-path", cached, sizeof(cached)) != 0 ||
        strcmp(cached, search_path ? search_path : SHIM_DEFAULT_PATH) != 0)
        return;
    if (config_identity(config, identity, sizeof(identity)) != 0 ||
        cache_field(text, "identity", cached, sizeof(cached)) != 0 || strcmp(cached, identity) != 0)
        return;
    if (cache_field(text, "runtime", runtime, sizeof(runtime)) != 0 || runtime[0] != '/' ||
        !search_dirs_unchanged(text))
        return;
    /* A runtime that is one of our launchers would exec us again, for ever: the cache was written when
     * it was something else (a file replaced in place leaves its directory's mtime alone). Python
     * refuses it in one line. */
    if (gct_is_launcher(runtime))
        return;
    int prints_version;
    int index = runc_globals(argc, argv, &prints_version);
    const char *bundle = NULL, *fast_mode = NULL;
    if (index && (strcmp(argv[index], "create") == 0 || strcmp(argv[index], "run") == 0)) {
        size_t len;
        struct stat st;
        char *spec = runc_create_bundle(argc, argv, index, &bundle) ? read_bundle_config(bundle, &len, &st) : NULL;
        /* no GPU request: as it is; a GPU request: edited here from the create cache, or Python decides */
        int done = spec && (asks_for_nothing(spec, len, text) ||
                            create_from_cache(name, self, bundle, spec, len, &st, text,
                                              cache_dir ? cache_dir : SHIM_DEFAULT_CACHE_DIR, config, identity, envp,
                                              &fast_mode) == 0);
        free(spec);
        if (!done)
            return;
    }

    char **args = calloc((size_t)argc + 1, sizeof(char *));
    char **runtime_env = runtime_environment(envp, runtime);
    if (!args || !runtime_env) {
        free(args);
        if (runtime_env)
            free(runtime_env[0]);
        free(runtime_env);
        create_roll_back();   /* Python decides, from config.json as it was */
        return;
    }
    args[0] = runtime;
    for (int i = 1; i < argc; i++)
        args[i] = argv[i];
    args[argc] = NULL;
    if (cache_field(text, "debug-log", log_path, sizeof(log_path)) == 0)
        log_passthrough(log_path, name, index ? argv[index] : "", bundle, runtime, fast_mode);
    if (prints_version) { /* ours first, then the runtime's own (as NVIDIA's runtime does) */
        launcher_print_version(name);
        putchar('\n');
        fflush(stdout);
    }
    execve(runtime, args, runtime_env);
    create_roll_back();   /* a config.json edited above is put back */
    if (prints_version) { /* printed already: Python must not print it again */
        /* the configured path: one printable, bounded line whatever it holds */
        text_print_line(name, "error", "cannot execute the low-level runtime: %s (%s)", strerror(errno), runtime);
        exit(1);
    }
    free(args); /* not executable any more: Python finds out why and says so */
    free(runtime_env[0]);
    free(runtime_env);
}

/* The caller's environment in a memfd for Python (NUL-separated entries), its number in *fd_out. */
static int environ_memfd(char **envp, int *fd_out)
{
    int fd = memfd_create("gct-caller-environ", MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    for (size_t i = 0; envp && envp[i]; i++) {
        size_t len = strlen(envp[i]) + 1, done = 0;
        while (done < len) {
            ssize_t n = write(fd, envp[i] + done, len - done);
            if (n < 0) {
                close(fd);
                return -1;
            }
            done += (size_t)n;
        }
    }
    if (lseek(fd, 0, SEEK_SET) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        close(fd);
        return -1;
    }
    *fd_out = fd;
    return 0;
}

int is_runtime_shim(const char *program_name)
{
    return strncmp(program_name, SHIM_PROGRAM_PREFIX, strlen(SHIM_PROGRAM_PREFIX)) == 0 &&
           (program_name[strlen(SHIM_PROGRAM_PREFIX)] == '\0' || program_name[strlen(SHIM_PROGRAM_PREFIX)] == '.');
}

/*
 * For the shim programs: exec the runtime at once when the command needs no Python; otherwise add to
 * Python's (already reduced) environment the memfd with the caller's environment and our own path.
 * Returns the environment to start Python with, or NULL on failure.
 */
char **runtime_shim_prepare(const char *name, const char *self, int argc, char **argv, char **envp,
                            char **python_env)
{
    try_runtime_passthrough(name, self, argc, argv, envp);
    int fd;
    if (environ_memfd(envp, &fd) != 0)
        return NULL;
    size_t n = 0;
    while (python_env[n])
        n++;
    char **out = calloc(n + 3, sizeof(char *));
    char *fd_entry = malloc(64);
    char *exe_entry = malloc(strlen(self) + 32);
    if (!out || !fd_entry || !exe_entry)
        return NULL;
    memcpy(out, python_env, n * sizeof(char *));
    snprintf(fd_entry, 64, "GCT_LAUNCHER_ENVIRON_FD=%d", fd);
    sprintf(exe_entry, "GCT_LAUNCHER_EXE=%s", self);
    out[n] = fd_entry;
    out[n + 1] = exe_entry;
    out[n + 2] = NULL;
    return out;
}
