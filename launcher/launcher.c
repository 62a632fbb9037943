/*
 * The launcher: a small statically linked program that starts our root-run programs: the Python
 * ones, and nvidia-cdi-hook, which is C and runs inside the launcher itself (no interpreter).
 *
 * Why it exists: runc runs our hooks as root, and a hook entry without `env` gets runc's or the
 * container's environment, which an image sets (LD_PRELOAD ...); and pip rewrites console-script
 * shebangs without interpreter flags. So each root-run program is installed as a copy of this binary. It
 *   - is static, so LD_PRELOAD and LD_LIBRARY_PATH cannot put code into it;
 *   - keeps only an allowlist of environment variables (PATH, NVIDIA_*, XDG_CONFIG_HOME, CUDA_MPS_PIPE_DIRECTORY);
 *   - never hands the interpreter (a dynamic program) a variable glibc's secure mode drops (LD_*,
 *     MALLOC_*, GCONV_PATH, ...: unsecure_names below), whatever the program and its command line;
 *   - runs `python -I -S` (no PYTHON* variables, no user site, no site.py or .pth side effects) with
 *     the install's own import path baked in at install time by launcher/install_launchers.py;
 *   - picks the program by its own file name (readlink /proc/self/exe), never by argv[0], which the
 *     caller controls.
 * A native program (cdi_hook/, linked with c_common/ and libcontainer_c/src) gets its main called directly, and so
 * does `nvidia-ctk [global options] hook ...` in every spelling (NVIDIA's older specs run their hooks
 * through nvidia-ctk; admin_start below): it is nvidia-cdi-hook, and an image's environment never
 * reaches an interpreter. Every other nvidia-ctk command line that click reads as its own is the
 * admin's: Python gets the caller's environment less the unsecure variables (`-I` still ignores
 * PYTHON* variables and the user site).
 *
 * Build: install_launchers.py writes launcher_config.h (GCT_PYTHON, GCT_SYS_PATH_CODE,
 * GCT_TOOLKIT_NAME, GCT_TOOLKIT_VERSION) and runs
 *   gcc -static -O2 -D_GNU_SOURCE -I<dir of launcher_config.h> -Ilauncher -Icdi_hook -Ic_common \
 *       -Ilibcontainer_c/src launcher/\*.c cdi_hook/\*.c c_common/\*.c libcontainer_c/src/\*.c -o launcher
 * (the checkout's top folders; the other files here: runtime_passthrough.c, the runtime shim's fast
 * path, with runc_argv.c, cache_file.c and the create cache's create_fastpath.c, config_shape.c,
 * create_apply.c and text_buf.c; launcher_identity.c, whether a file is one of us).
 * The wheel's build (setup.py) leaves GCT_PYTHON empty: a launcher installed by pip reads the
 * interpreter from the first line of INTERPRETER_FILE beside it, which the installer wrote from
 * "#!python" (PEP 427: scripts starting with "#!python" name the installing interpreter), and
 * GCT_SYS_PATH_CODE asks that interpreter for its (venv's) site-packages.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "cdi_hook.h"
#include "launcher_config.h"
#include "launcher_identity.h"
#include "message_text.h"
#include "runtime_passthrough.h"

/* Every program's --version line, as cdi/version.py prints it for the Python ones; the version was
 * baked in by install_launchers.py from the package's own (one source). */
void launcher_print_version(const char *program)
{
    printf("%s (%s) %s\n", program, GCT_TOOLKIT_NAME, GCT_TOOLKIT_VERSION);
}


/* What makes this binary (and every copy, link and other installation of it) recognisable as a launcher
 * of this toolkit: an ELF note in a PT_NOTE segment (launcher_identity.c reads it). */
__attribute__((section(".note.gpu-container-toolkit"), used, aligned(4)))
static const struct gct_launcher_note launcher_note = GCT_LAUNCHER_NOTE_INIT;

struct program {
    const char *name;   /* installed file name */
    const char *target; /* "package.module:function" run with sys.argv = [name, args...]; NULL: native */
    int (*native_main)(int argc, char **argv); /* a C program run right here */
    const char *native_command; /* with a target: the command (after global options) that runs native_main */
    int keeps_environment;      /* an admin CLI: the caller's environment for Python (less the loader's
                                 * variables), not the allowlist, for a command line it reads as its own */
};

static const struct program programs[] = {
    {"nvidia-container-runtime", "runtime_shim.main:main", NULL, NULL, 0},
    {"nvidia-container-runtime.cdi", "runtime_shim.main:main", NULL, NULL, 0},
    {"nvidia-container-runtime.legacy", "runtime_shim.main:main", NULL, NULL, 0},
    {"nvidia-container-runtime-hook", "hook.prestart:main", NULL, NULL, 0},
    {"nvidia-cdi-hook", NULL, cdi_hook_main, NULL, 0},
    {"nvidia-container-cli", "hook.cli:main", NULL, NULL, 0},
    {"nvidia-ctk", "ctk.main:main", cdi_hook_main, "hook", 1},
    /* a node service (the kubelet's device plugin): NVIDIA's settings come from its environment
     * (MIG_STRATEGY, DEVICE_LIST_STRATEGY, ...); never on a container's start path */
    {"nvidia-device-plugin", "device_plugin.main:main", NULL, NULL, 1},
    /* used by the tests: prints what the Python side sees (argv, environment, sys.flags, sys.path) */
    {"gct-launcher-probe", "launcher.launcher_probe:main", NULL, NULL, 0},
    /* the same, classifying its command line as nvidia-ctk does (its `hook` is nvidia-cdi-hook) */
    {"gct-launcher-probe-ctk", "launcher.launcher_probe:main", cdi_hook_main, "hook", 1},
};

/* Beside a launcher that pip installed: "#!/path/to/python" (see the top) */
#define INTERPRETER_FILE ".gpu-container-toolkit-python"

static const char *const kept_prefixes[] = {"NVIDIA_", NULL};
/* CUDA_MPS_PIPE_DIRECTORY: the MPS directory every program mounts for compute (cdi.driver_files) */
static const char *const kept_names[] = {"PATH", "XDG_CONFIG_HOME", "CUDA_MPS_PIPE_DIRECTORY", NULL};
static const char default_path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/* What glibc's secure mode (AT_SECURE: setuid programs) removes from the environment, because it
 * makes the dynamic loader or libc load or read files it names (glibc's sysdeps/generic/unsecvars.h,
 * widened to whole families): every LD_* (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT ...), every MALLOC_*,
 * GLIBC_TUNABLES, and the names below. The interpreter is a dynamic program run as root: none of
 * these ever reaches it, whatever program, command line or caller. */
static const char *const unsecure_prefixes[] = {"LD_", "MALLOC_", NULL};
static const char *const unsecure_names[] = {
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "NIS_PATH",
    "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR", NULL};

static int env_key_is(const char *entry, size_t keylen, const char *name)
{
    return keylen == strlen(name) && strncmp(entry, name, keylen) == 0;
}

static int env_is_kept(const char *entry)
{
    const char *eq = strchr(entry, '=');
    size_t keylen = eq ? (size_t)(eq - entry) : strlen(entry);
    for (int i = 0; kept_prefixes[i]; i++)
        if (strncmp(entry, kept_prefixes[i], strlen(kept_prefixes[i])) == 0 && eq)
            return 1;
    for (int i = 0; kept_names[i]; i++)
        if (eq && env_key_is(entry, keylen, kept_names[i]))
            return 1;
    return 0;
}

/* An entry the interpreter must not see: an unsecure variable, or no NAME=value at all. */
static int env_is_unsecure(const char *entry)
{
    const char *eq = strchr(entry, '=');
    if (!eq || eq == entry)
        return 1;
    size_t keylen = (size_t)(eq - entry);
    for (int i = 0; unsecure_prefixes[i]; i++)
        if (strncmp(entry, unsecure_prefixes[i], strlen(unsecure_prefixes[i])) == 0)
            return 1;
    for (int i = 0; unsecure_names[i]; i++)
        if (env_key_is(entry, keylen, unsecure_names[i]))
            return 1;
    return 0;
}

/* Removes the unsecure entries from env, in place: the last step before the interpreter starts. */
static void drop_unsecure(char **env)
{
    size_t kept = 0;
    for (size_t i = 0; env[i]; i++)
        if (!env_is_unsecure(env[i]))
            env[kept++] = env[i];
    env[kept] = NULL;
}

static void die(const char *name, const char *what)
{
    text_print_line(name, "error", "%s (%s)", what, strerror(errno));   /* a file name: one bounded line */
    exit(127);
}

/* A copy of the caller's environment (the array, not the strings), for drop_unsecure to reduce. */
static char **caller_environment(char **envp)
{
    size_t n = 0;
    while (envp && envp[n])
        n++;
    char **out = calloc(n + 1, sizeof(char *));
    if (out && n)
        memcpy(out, envp, n * sizeof(char *));
    return out;
}

/* A fresh environment with only the allowlisted variables, and PATH always set. */
static char **clean_environment(char **envp)
{
    size_t n = 0, kept = 0;
    int has_path = 0;
    while (envp && envp[n])
        n++;
    char **out = calloc(n + 2, sizeof(char *));
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (!env_is_kept(envp[i]))
            continue;
        if (strncmp(envp[i], "PATH=", 5) == 0)
            has_path = 1;
        out[kept++] = envp[i];
    }
    if (!has_path)
        out[kept++] = (char *)default_path;
    out[kept] = NULL;
    return out;
}

/* Our own file name: /proc/self/exe cannot be forged by the caller the way argv[0] can (a spec's hook
 * `args[0]`, say). Without /proc (a package's scriptlet run chrooted, as `rpm --root` does, calls
 * nvidia-ctk), the path the kernel executed (AT_EXECFN): the hook's `path`, as the caller's execve
 * named it; it differs only for a symlink, whose own name then picks the program, which grants
 * nothing: the launcher is not setuid, and whoever runs it can run each of its programs. */
static const char *own_name(char *buf, size_t size)
{
    ssize_t len = readlink("/proc/self/exe", buf, size - 1);
    if (len < 0) {
        const char *execfn = (const char *)getauxval(AT_EXECFN);
        if (!execfn || !execfn[0] || strlen(execfn) >= size)
            return NULL;
        len = (ssize_t)strlen(execfn);
        memcpy(buf, execfn, (size_t)len);
    }
    buf[len] = '\0';
    char *slash = strrchr(buf, '/');
    return slash ? slash + 1 : buf;
}

/* The interpreter named by the first line of INTERPRETER_FILE in the launcher's own folder, or NULL. */
static const char *installed_interpreter(const char *self, char *buf, size_t size)
{
    const char *slash = strrchr(self, '/');
    int n = slash ? snprintf(buf, size, "%.*s/" INTERPRETER_FILE, (int)(slash - self), self)
                  : snprintf(buf, size, INTERPRETER_FILE);   /* run by a relative name, without /proc */
    if (n < 0 || (size_t)n >= size)
        return NULL;
    FILE *f = fopen(buf, "re");
    if (!f)
        return NULL;
    char *line = fgets(buf, (int)size, f);
    fclose(f);
    size_t len = line ? strcspn(buf, "\r\n") : 0;
    if (!line || buf[len] == '\0' || strncmp(buf, "#!/", 3) != 0) {
        errno = ENOEXEC;   /* no "#!/..." line (the installer did not rewrite "#!python"), or too long */
        return NULL;
    }
    buf[len] = '\0';
    return buf + 2;
}

/*
 * How an admin CLI's command line starts Python, or runs its native command (nvidia-ctk's `hook`).
 *
 * Before its command, a command line has global options. click (ctk.group) knows --debug, and --help,
 * -h and --version, which print and exit; a spec written for NVIDIA's nvidia-ctk may also spell
 * --debug=true, -d, -d=1, -debug, --quiet, -q, -dq, or options of other versions, with a value joined
 * (--log-level=debug) or separate (--log-level debug). The command is the first word after them
 * ("--" ends them, as in click); a word after an option whose arity the launcher cannot know (not one
 * of the flags, no "=value") is taken as its value, unless it is the native command. Then:
 *   - the native command: its C main, with argv from the command on; the global options before it only
 *     set verbosity. Also for every spelling click refuses: a spec's `nvidia-ctk --debug=true hook ...`
 *     is the hook, and an image's environment (which runc hands a hook without `env`) never reaches an
 *     interpreter;
 *   - the native command with --help, -h or --version before it (click prints help or the version),
 *     and any command line with an option click does not know (click prints a usage error): Python
 *     with the allowlist, as every other program;
 *   - any other command line (only click's own options, any other command): Python with the caller's
 *     environment, the admin's.
 * Whichever: no unsecure variable (drop_unsecure) ever reaches the interpreter.
 * click agrees: it runs `hook` only for (--debug)* [--] hook, which is native here (the tests hold the
 * launcher and click to one list of spellings: tests/unit/test_launcher.py).
 */
enum start { START_NATIVE, START_ALLOWLIST, START_CALLER_ENV };

/* Options that take no value in either CLI (their --name=value spellings carry the value joined). */
static const char *const flag_options[] = {"--debug", "-debug", "--quiet", "-quiet", "--help", "-help", "-h",
                                           "--version", "-version", "-v", NULL};
static const char short_flag_letters[] = "dq";   /* -d -q, alone or combined (-dq, -qd, -dd) */
static const char *const click_options[] = {"--debug", "-d", "--quiet", "-q", "--help", "-h", "--version", NULL};
static const char *const exiting_options[] = {"--help", "-h", "--version", NULL};

static int is_one_of(const char *arg, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(arg, list[i]) == 0)
            return 1;
    return 0;
}

/* An option that takes no value: one of flag_options, a bundle of short flags, or any "--name=value". */
static int takes_no_value(const char *option)
{
    if (strchr(option, '=') || is_one_of(option, flag_options))
        return 1;
    if (option[1] == '-')
        return 0;
    return strspn(option + 1, short_flag_letters) == strlen(option + 1);
}

static enum start admin_start(const struct program *program, int argc, char **argv, int *command)
{
    int known = 1, exits = 0, i = 1;
    while (i < argc && argv[i][0] == '-' && argv[i][1]) {
        const char *option = argv[i++];
        if (strcmp(option, "--") == 0)
            break;
        known &= is_one_of(option, click_options);
        exits |= is_one_of(option, exiting_options);
        if (!takes_no_value(option) && i < argc && argv[i][0] != '-' && strcmp(argv[i], program->native_command) != 0)
            i++;   /* its value, perhaps */
    }
    *command = i < argc && strcmp(argv[i], program->native_command) == 0 ? i : 0;
    if (*command && !exits)
        return START_NATIVE;
    return *command || !known ? START_ALLOWLIST : START_CALLER_ENV;
}

static const struct program *find_program(const char *name)
{
    for (size_t i = 0; i < sizeof(programs) / sizeof(programs[0]); i++)
        if (strcmp(programs[i].name, name) == 0)
            return &programs[i];
    return NULL;
}

/* The host's uid for our euid: our euid through /proc/self/uid_map (the identity outside any user
 * namespace, a mapped id inside one: LXC's unprivileged root is 0 here and 100000 on the host); -1 when
 * it cannot be read. */
static long host_uid_of_euid(void)
{
    char buf[4096];
    unsigned long uid = geteuid(), inside, outside, count;
    int fd = open("/proc/self/uid_map", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return fd < 0 ? (long)uid : -1;   /* no /proc: go by the euid */
    buf[n] = '\0';
    for (char *line = buf; *line; ) {
        char *end = strchr(line, '\n');
        if (sscanf(line, "%lu %lu %lu", &inside, &outside, &count) == 3 && uid >= inside && uid - inside < count)
            return (long)(outside + (uid - inside));
        if (!end)
            break;
        line = end + 1;
    }
    return -1;
}

int main(int argc, char **argv, char **envp)
{
    char self[PATH_MAX];
    const char *name = own_name(self, sizeof(self));
    if (!name)
        die("gct-launcher", "cannot read /proc/self/exe nor the path it was run by");
    const struct program *program = find_program(name);
    if (!program) {
        errno = ENOENT;
        die(name, "this launcher does not know a program of that name");
    }
    /* A native program reads nothing from the environment, and every program it starts (the
     * sandboxed ldconfig) gets an empty one. */
    if (program->native_main && !program->target)
        return program->native_main(argc, argv);
    int command = 0;
    /* a program without a native command that keeps the environment (a node service, never a hook)
     * keeps it for every command line */
    enum start start = program->native_command ? admin_start(program, argc, argv, &command)
                       : program->keeps_environment ? START_CALLER_ENV : START_ALLOWLIST;
    if (start == START_NATIVE)   /* the options before it only set verbosity: argv from the command on */
        return program->native_main(argc - command, argv + command);
    int keeps_environment = program->keeps_environment && start == START_CALLER_ENV;
    char **env = keeps_environment ? caller_environment(envp) : clean_environment(envp);
    if (!env)
        die(name, "out of memory");
    if (is_runtime_shim(program->name)) {
        /* may exec the low-level runtime right here; else Python gets the caller's environment by fd */
        env = runtime_shim_prepare(program->name, self, argc, argv, envp, env);
        if (!env)
            die(name, "cannot pass the caller's environment on");
    }
    drop_unsecure(env);

    /* sys.argv becomes [argv0, args...]; the target module is imported with the baked path only. A
     * package that is not there (uninstalled, or an editable install whose path only a .pth file
     * gives) is one line, not a traceback; an import failing inside the program is the program's. */
    char bootstrap[4096];
    const char *colon = strchr(program->target, ':');
    int written = snprintf(bootstrap, sizeof(bootstrap),
                           "import sys\n"
                           "%s\n"
                           "del sys.argv[0]\n"
                           "try:\n"
                           "    from %.*s import %s as _main\n"
                           "except ImportError as e:\n"
                           "    sys.exit(f'%s: error: cannot start: {e} (is gpu-container-toolkit installed for "
                           "{sys.executable}?)')\n"
                           "sys.exit(_main())\n",
                           GCT_SYS_PATH_CODE, (int)(colon - program->target), program->target, colon + 1,
                           program->name);
    if (written < 0 || (size_t)written >= sizeof(bootstrap)) {
        errno = ENAMETOOLONG;
        die(name, "bootstrap too long");
    }
    /* python -I -S -c BOOTSTRAP ARGV0 args...: with -c, sys.argv[0] is "-c", which the bootstrap
     * drops. ARGV0: the program name from our table; for the admin CLI the path it was run by, as a
     * console script would see it (it looks for the other programs beside it). */
    const char *argv0 = program->name;
    if (program->keeps_environment) {   /* whichever environment it gets */
        const char *execfn = (const char *)getauxval(AT_EXECFN);
        argv0 = execfn && execfn[0] ? execfn : self;
    }
    char **args = calloc((size_t)argc + 6, sizeof(char *));
    if (!args)
        die(name, "out of memory");
    char interpreter_buf[PATH_MAX + 3];
    const char *python = GCT_PYTHON;
    if (!python[0] && !(python = installed_interpreter(self, interpreter_buf, sizeof(interpreter_buf))))
        die(name, "cannot read the interpreter's name from " INTERPRETER_FILE " beside the program");
    int k = 0;
    args[k++] = (char *)python;
    args[k++] = "-I";
    args[k++] = "-S";
    args[k++] = "-c";
    args[k++] = bootstrap;
    args[k++] = (char *)argv0;
    for (int i = 1; i < argc; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    execve(python, args, env);
    int exec_errno = errno;
    const char *reason = strerror(exec_errno);
    long host_uid = exec_errno == EACCES ? host_uid_of_euid() : 0;
    /* the interpreter's path comes from a file beside the program: one printable, bounded line */
    if (host_uid > 0) {
        /* Not the host's root, where the programs are run as another user: unprivileged LXC runs the CLI
         * as the container's root (root in its user namespace, a mapped host uid), a rootless engine as
         * the user. The fix is where the installation is, not this call: say so (README, Security model). */
        text_print_line(name, "error", "cannot execute the interpreter as host uid %ld: %s; this program runs as "
                        "that user here (an unprivileged container's root, a rootless engine): install "
                        "gpu-container-toolkit where every user can read and run it, as the packages do (not in a "
                        "venv under /root) (%s)", host_uid, reason, python);
        return 127;
    }
    text_print_line(name, "error", "cannot execute %s (%s)", python, reason);
    return 127;
}
