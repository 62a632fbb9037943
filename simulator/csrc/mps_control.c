/* nvidia-cuda-mps-control of the simulated host: the MPS control daemon (`-d`, or `-f` in the
 * foreground) and, without an option, the control program that sends stdin's commands to it.
 *
 * Kept as NVIDIA documents it: the pipe directory ($CUDA_MPS_PIPE_DIRECTORY, /tmp/nvidia-mps) and
 * log directory ($CUDA_MPS_LOG_DIRECTORY, /var/log/nvidia-mps) with control.log and server.log; one
 * server per user id, started by `start_server -uid UID` or by the first client of that uid, with
 * the defaults in force when it starts; the commands start_server, get_server_list,
 * set/get_default_active_thread_percentage, set/get_default_device_pinned_mem_limit and quit.
 * Ours (docs/mps.md): the wire format (mps_protocol.h), the log lines' wording, the answers' exact
 * text, and one rule NVIDIA does not have: a command that changes the daemon (start_server, set_*,
 * quit) is taken only from a process in the daemon's own PID namespace, so a container given the
 * pipe directory can connect as a client and read the limits but never raise them.
 *
 * The server is a child of the daemon (running as the uid it serves) that logs to server.log and
 * waits for the end; the limits a client gets are the daemon's record of that server's. */
#define _GNU_SOURCE
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>

#include "mps_protocol.h"

#define MAX_SERVERS 16
#define PID_FILE "nvidia-cuda-mps-control.pid"

struct server {
    pid_t pid;
    uid_t uid;
    double active_thread_percentage;
    unsigned long long pinned[MPS_MAX_DEVICES];   /* bytes, 0: no limit */
};

static struct {
    int pipe_fd, log_fd;                 /* the directories */
    int control_log, listen_fd;
    double active_thread_percentage;
    unsigned long long pinned[MPS_MAX_DEVICES];
    struct server servers[MAX_SERVERS];
    int nservers;
    char devices[MPS_MAX_DEVICES][96];   /* CUDA_VISIBLE_DEVICES entries, as the daemon was started */
    int ndevices;
    char pid_ns[64];
} d;

static void log_line(int fd, const char *who, const char *fmt, ...)
{
    if (fd < 0)
        return;
    char line[1024];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "[%04d-%02d-%02d %02d:%02d:%02d.%03ld %s %ld] ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)tv.tv_usec / 1000, who,
                     (long)getpid());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    mps_write_all(fd, line, (size_t)n);   /* one write: O_APPEND keeps concurrent lines whole */
}

static int die(const char *fmt, const char *what, const char *where)
{
    fprintf(stderr, "nvidia-cuda-mps-control: error: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, " (%s)\n", where);
    return 1;
}

static int make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void read_visible_devices(void)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    if (!env || !*env)
        return;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", env);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok && d.ndevices < MPS_MAX_DEVICES; tok = strtok_r(NULL, ",", &save))
        snprintf(d.devices[d.ndevices++], sizeof d.devices[0], "%s", tok);
}

static void reap_servers(void)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < d.nservers; i++) {
            if (d.servers[i].pid != pid)
                continue;
            log_line(d.control_log, "Control", "Server %ld exited with status %d", (long)pid,
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
            d.servers[i] = d.servers[--d.nservers];
            break;
        }
    }
}

static volatile sig_atomic_t server_done;
static void on_term(int sig) { (void)sig; server_done = 1; }

static void server_main(uid_t uid, const struct server *limits, int ready)
{
    signal(SIGTERM, on_term);
    signal(SIGINT, SIG_IGN);
    sigset_t term, waiting;   /* SIGTERM is blocked (as in the daemon) except inside sigsuspend: never lost */
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &waiting);
    sigdelset(&waiting, SIGTERM);
    for (int fd = 3; fd < 1024; fd++)   /* the listening socket, the connection being served */
        if (fd != d.log_fd && fd != ready)
            close(fd);
    int log = openat(d.log_fd, "server.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (getuid() != uid && (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) {
        log_line(log, "Server", "Failed to switch to user id %u", (unsigned)uid);
        _exit(1);
    }
    log_line(log, "Server", "Startup");
    log_line(log, "Server", "Server starting as user id %u, default active thread percentage %.1f",
             (unsigned)uid, limits->active_thread_percentage);
    for (int i = 0; i < MPS_MAX_DEVICES; i++) {
        if (limits->pinned[i]) {
            char size[32];
            mps_format_size(limits->pinned[i], size, sizeof size);
            log_line(log, "Server", "Device %d pinned memory limit %s", i, size);
        }
    }
    mps_write_all(ready, "1", 1);   /* started: the daemon may now answer (and end) it */
    close(ready);
    while (!server_done)
        sigsuspend(&waiting);
    log_line(log, "Server", "Server exiting");
    _exit(0);
}

static struct server *find_server(uid_t uid)
{
    for (int i = 0; i < d.nservers; i++)
        if (d.servers[i].uid == uid)
            return &d.servers[i];
    return NULL;
}

/* The server of `uid`, started with the current defaults when there is none. NULL and `err` set
 * when another user's server runs (the real daemon queues the request until that server ends). */
static struct server *start_server(uid_t uid, char *err, size_t errlen)
{
    reap_servers();
    struct server *s = find_server(uid);
    if (s)
        return s;
    if (d.nservers > 0) {
        snprintf(err, errlen, "a server for user id %u is running; one user at a time",
                 (unsigned)d.servers[0].uid);
        return NULL;
    }
    struct server next = {.uid = uid, .active_thread_percentage = d.active_thread_percentage};
    memcpy(next.pinned, d.pinned, sizeof next.pinned);
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return NULL;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(ready[0]);
        close(ready[1]);
        return NULL;
    }
    if (pid == 0) {
        close(ready[0]);
        server_main(uid, &next, ready[1]);
    }
    close(ready[1]);
    char ok = 0;
    ssize_t got;
    while ((got = read(ready[0], &ok, 1)) < 0 && errno == EINTR)
        ;
    close(ready[0]);
    if (got != 1) {   /* it could not become the user, or died: see server.log */
        waitpid(pid, NULL, 0);
        snprintf(err, errlen, "the server for user id %u did not start (server.log)", (unsigned)uid);
        return NULL;
    }
    next.pid = pid;
    d.servers[d.nservers] = next;
    log_line(d.control_log, "Control", "Starting new server %ld for user %u", (long)pid, (unsigned)uid);
    return &d.servers[d.nservers++];
}

static void stop_servers(void)
{
    for (int i = 0; i < d.nservers; i++)
        kill(d.servers[i].pid, SIGTERM);
    for (int i = 0; i < d.nservers; i++)
        waitpid(d.servers[i].pid, NULL, 0);
    d.nservers = 0;
}

static int peer_in_our_pid_namespace(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0)
        return 0;   /* a peer in another PID namespace that does not map into ours has pid 0 */
    char path[64], ns[64];
    snprintf(path, sizeof path, "/proc/%ld/ns/pid", (long)cred.pid);
    ssize_t n = readlink(path, ns, sizeof ns - 1);
    if (n <= 0)
        return 0;
    ns[n] = 0;
    return strcmp(ns, d.pid_ns) == 0;
}

struct reply {
    char text[8192];
    size_t len;
};

static void say(struct reply *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->text + r->len, sizeof r->text - r->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        r->len += (size_t)n < sizeof r->text - r->len ? (size_t)n : sizeof r->text - r->len - 1;
}

static int parse_device(const char *text)
{
    char *end;
    long dev = text ? strtol(text, &end, 10) : -1;
    return text && *text && !*end && dev >= 0 && dev < MPS_MAX_DEVICES ? (int)dev : -1;
}

/* Runs one command line; returns 1 when it was quit. */
static int run_command(char *line, int privileged, struct reply *r)
{
    char *argv[8];
    int argc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(line, " \t\r", &save); tok && argc < 8; tok = strtok_r(NULL, " \t\r", &save))
        argv[argc++] = tok;
    if (argc == 0)
        return 0;
    const char *cmd = argv[0];
    log_line(d.control_log, "Control", "Cmd:%s", cmd);
    reap_servers();
    int changes = !strncmp(cmd, "set_", 4) || !strcmp(cmd, "start_server") || !strcmp(cmd, "quit");
    if (changes && !privileged) {
        log_line(d.control_log, "Control", "Refused %s from a process outside the daemon's PID namespace", cmd);
        say(r, "Refused: %s only from the daemon's own PID namespace\n", cmd);
        return 0;
    }
    if (!strcmp(cmd, "get_server_list") && argc == 1) {
        for (int i = 0; i < d.nservers; i++)
            say(r, "%ld\n", (long)d.servers[i].pid);
    } else if (!strcmp(cmd, "start_server") && argc == 3 && !strcmp(argv[1], "-uid")) {
        char *end, err[256];
        unsigned long uid = strtoul(argv[2], &end, 10);
        if (!*argv[2] || *end || uid > 0xfffffffeUL)
            say(r, "Invalid user id %s\n", argv[2]);
        else if (!start_server((uid_t)uid, err, sizeof err))
            say(r, "%s\n", err);
    } else if (!strcmp(cmd, "set_default_active_thread_percentage") && argc == 2) {
        char *end;
        double p = strtod(argv[1], &end);
        if (!*argv[1] || *end || !(p > 0 && p <= 100))
            say(r, "Invalid active thread percentage %s (more than 0, at most 100)\n", argv[1]);
        else {
            d.active_thread_percentage = p;
            say(r, "%.1f\n", p);
        }
    } else if (!strcmp(cmd, "get_default_active_thread_percentage") && argc == 1) {
        say(r, "%.1f\n", d.active_thread_percentage);
    } else if (!strcmp(cmd, "set_default_device_pinned_mem_limit") && argc == 3) {
        int dev = parse_device(argv[1]);
        unsigned long long bytes;
        if (dev < 0)
            say(r, "Invalid device %s\n", argv[1]);
        else if (mps_parse_size(argv[2], &bytes) != 0)
            say(r, "Invalid memory limit %s (a number with K, M, G or T)\n", argv[2]);
        else
            d.pinned[dev] = bytes;
    } else if (!strcmp(cmd, "get_default_device_pinned_mem_limit") && argc == 2) {
        int dev = parse_device(argv[1]);
        char size[32];
        if (dev < 0) {
            say(r, "Invalid device %s\n", argv[1]);
        } else {
            mps_format_size(d.pinned[dev], size, sizeof size);
            say(r, "%s\n", size);
        }
    } else if (!strcmp(cmd, "quit") && argc == 1) {
        return 1;
    } else {
        say(r, "Unknown command or wrong arguments: %s\n", cmd);
    }
    return 0;
}

static void serve_client(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    struct reply r = {.len = 0};
    char err[256];
    struct server *s = NULL;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        say(&r, "error cannot read the client's credentials\n");
    else if (!(s = start_server(cred.uid, err, sizeof err)))
        say(&r, "error %s\n", err);
    if (s) {
        log_line(d.control_log, "Control", "Accepting connection of client of user %u for server %ld",
                 (unsigned)cred.uid, (long)s->pid);
        say(&r, "server %ld\nactive_thread_percentage %.1f\n", (long)s->pid, s->active_thread_percentage);
        int n = d.ndevices;
        for (int i = n; i < MPS_MAX_DEVICES; i++)
            if (s->pinned[i])
                n = i + 1;
        for (int i = 0; i < n; i++)
            say(&r, "device %d %s %llu\n", i, i < d.ndevices ? d.devices[i] : "-", s->pinned[i]);
        say(&r, "end\n");
    }
    mps_write_all(fd, r.text, r.len);
}

static void remove_files(void)
{
    unlinkat(d.pipe_fd, MPS_CONTROL_SOCKET, 0);
    unlinkat(d.pipe_fd, PID_FILE, 0);
}

/* The daemon serves every connection at once (poll): a connection that says nothing, or never reads
 * its answers, must not stop the others, since any share's container can connect. Sockets are
 * non-blocking; a peer whose answer does not fit its socket buffer is dropped. */
#define MAX_CONNECTIONS 64

struct connection {
    int fd;
    int role;         /* 0 not said yet, 1 ui */
    int privileged;   /* in the daemon's PID namespace */
    size_t have;
    char buf[4096];
};

static struct connection conns[MAX_CONNECTIONS];
static int nconns;

static void drop(int i)
{
    if (conns[i].role == 1)
        log_line(d.control_log, "Control", "UI closed");
    close(conns[i].fd);
    conns[i] = conns[--nconns];
}

/* One line of connection c: 0 go on, -1 drop the connection, 1 the daemon quits. */
static int handle_line(struct connection *c, char *line)
{
    if (!c->role) {
        if (!strcmp(line, "client")) {
            serve_client(c->fd);
            return -1;
        }
        if (strcmp(line, "ui") != 0)
            return -1;
        c->role = 1;
        log_line(d.control_log, "Control", "NEW UI");
        return 0;
    }
    struct reply r = {.len = 0};
    int quit = run_command(line, c->privileged, &r);
    if (quit) {
        log_line(d.control_log, "Control", "Exit");
        stop_servers();
        remove_files();
    }
    r.text[r.len] = 0;
    if (mps_write_all(c->fd, r.text, r.len + 1) != 0)   /* the NUL ends the answer */
        return quit ? 1 : -1;
    return quit;
}

/* Reads what connection i sent and runs its complete lines: 0, -1 (dropped) or 1 (quit). */
static int serve_readable(int i)
{
    struct connection *c = &conns[i];
    ssize_t n = read(c->fd, c->buf + c->have, sizeof c->buf - c->have);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (n <= 0) {
        drop(i);
        return -1;
    }
    c->have += (size_t)n;
    char *nl;
    while ((nl = memchr(c->buf, '\n', c->have))) {
        *nl = 0;
        int done = handle_line(c, c->buf);
        if (done == 1)
            return 1;
        if (done < 0) {
            drop(i);
            return -1;
        }
        size_t used = (size_t)(nl - c->buf) + 1;
        memmove(c->buf, c->buf + used, c->have - used);
        c->have -= used;
    }
    if (c->have == sizeof c->buf) {   /* a line longer than any command */
        drop(i);
        return -1;
    }
    return 0;
}

static volatile sig_atomic_t daemon_terminated;
static void on_daemon_term(int sig) { (void)sig; daemon_terminated = 1; }

static int serve(const char *pipe_dir)
{
    /* SIGTERM ends the daemon as quit does: its servers first, then its files */
    struct sigaction sa = {.sa_handler = on_daemon_term};
    sigaction(SIGTERM, &sa, NULL);
    sigset_t term, waiting;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &waiting);   /* taken only inside ppoll: never lost between check and wait */
    sigdelset(&waiting, SIGTERM);
    for (;;) {
        if (daemon_terminated) {
            log_line(d.control_log, "Control", "Exit (SIGTERM)");
            stop_servers();
            remove_files();
            return 0;
        }
        struct pollfd fds[MAX_CONNECTIONS + 1];
        fds[0] = (struct pollfd){.fd = d.listen_fd, .events = POLLIN};
        for (int i = 0; i < nconns; i++)
            fds[i + 1] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
        int count = nconns;
        if (ppoll(fds, (nfds_t)count + 1, NULL, &waiting) < 0) {
            if (errno == EINTR)
                continue;
            return die("poll: %s", strerror(errno), pipe_dir);
        }
        /* connections last first: drop() moves the last one into the freed slot */
        for (int i = count - 1; i >= 0; i--)
            if (fds[i + 1].revents && serve_readable(i) == 1)
                return 0;
        if (fds[0].revents & POLLIN) {
            int fd = accept4(d.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0)
                continue;
            if (nconns == MAX_CONNECTIONS) {
                close(fd);
                continue;
            }
            conns[nconns++] = (struct connection){.fd = fd, .privileged = peer_in_our_pid_namespace(fd)};
        }
    }
}

/* An answering daemon already listening in the pipe directory? */
static int daemon_running(const char *pipe_dir)
{
    int fd = mps_connect(pipe_dir);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

static int run_daemon(int foreground)
{
    const char *pipe_dir = mps_pipe_directory();
    const char *log_dir = getenv("CUDA_MPS_LOG_DIRECTORY");
    if (!log_dir || !*log_dir)
        log_dir = MPS_DEFAULT_LOG_DIRECTORY;
    if (make_dirs(pipe_dir) != 0)
        return die("cannot create the pipe directory: %s", strerror(errno), pipe_dir);
    if (make_dirs(log_dir) != 0)
        return die("cannot create the log directory: %s", strerror(errno), log_dir);
    if (daemon_running(pipe_dir)) {
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    d.pipe_fd = open(pipe_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    d.log_fd = open(log_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d.pipe_fd < 0 || d.log_fd < 0)
        return die("cannot open: %s", strerror(errno), d.pipe_fd < 0 ? pipe_dir : log_dir);
    d.control_log = openat(d.log_fd, "control.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (d.control_log < 0)
        return die("cannot open control.log: %s", strerror(errno), log_dir);
    ssize_t n = readlink("/proc/self/ns/pid", d.pid_ns, sizeof d.pid_ns - 1);
    if (n <= 0)
        return die("cannot read the PID namespace: %s", strerror(errno), "/proc/self/ns/pid");
    d.pid_ns[n] = 0;
    d.active_thread_percentage = 100.0;
    read_visible_devices();

    struct sockaddr_un addr;
    unlinkat(d.pipe_fd, MPS_CONTROL_SOCKET, 0);   /* a stale socket of a daemon that died */
    d.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (d.listen_fd < 0 || mps_socket_address(d.pipe_fd, MPS_CONTROL_SOCKET, &addr) != 0 ||
        bind(d.listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(d.listen_fd, 64) != 0)
        return die("cannot listen: %s", strerror(errno), pipe_dir);
    /* clients of any user connect; what they may do is decided per connection */
    fchmodat(d.pipe_fd, MPS_CONTROL_SOCKET, 0666, 0);

    int ready[2] = {-1, -1};
    if (!foreground) {
        /* the caller returns once the daemon is listening and its pid file is written */
        if (pipe(ready) != 0)
            return die("pipe: %s", strerror(errno), pipe_dir);
        pid_t pid = fork();
        if (pid < 0)
            return die("fork: %s", strerror(errno), pipe_dir);
        if (pid > 0) {
            close(ready[1]);
            char ok = 0;
            ssize_t got;
            while ((got = read(ready[0], &ok, 1)) < 0 && errno == EINTR)
                ;
            waitpid(pid, NULL, 0);
            return got == 1 && ok == '1' ? 0 : 1;
        }
        close(ready[0]);
        setsid();
        if (fork() != 0)
            _exit(0);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            if (null > 2)
                close(null);
        }
        if (chdir("/") != 0)
            _exit(1);
    }
    char pid_text[32];
    int len = snprintf(pid_text, sizeof pid_text, "%ld\n", (long)getpid());
    int pid_fd = openat(d.pipe_fd, PID_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (pid_fd < 0 || mps_write_all(pid_fd, pid_text, (size_t)len) != 0)
        return die("cannot write %s", PID_FILE, pipe_dir);
    close(pid_fd);
    signal(SIGPIPE, SIG_IGN);
    log_line(d.control_log, "Control", "Starting control daemon using socket %s/%s", pipe_dir, MPS_CONTROL_SOCKET);
    log_line(d.control_log, "Control", "To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=%s",
             pipe_dir);
    if (ready[1] >= 0) {
        mps_write_all(ready[1], "1", 1);
        close(ready[1]);
    }
    return serve(pipe_dir);
}

static int run_ui(void)
{
    const char *pipe_dir = mps_pipe_directory();
    int fd = mps_connect(pipe_dir);
    if (fd < 0) {
        fprintf(stderr, "Cannot find MPS control daemon process (%s/%s)\n", pipe_dir, MPS_CONTROL_SOCKET);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    if (mps_write_all(fd, "ui\n", 3) != 0)
        return 1;
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') {
            if (len + 1 >= sizeof line)
                return die("%s", "command line too long", "stdin");
            line[len++] = '\n';
            line[len] = 0;
        }
        if (mps_write_all(fd, line, len) != 0)
            return 1;
        size_t answered = 0;
        for (;;) {   /* the answer, up to its NUL */
            char c;
            ssize_t n = read(fd, &c, 1);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return 1;
            if (c == 0)
                break;
            putchar(c);
            answered++;
        }
        fflush(stdout);
        if (!strcmp(line, "quit\n") && !answered) {   /* quitting: the connection closes as the daemon exits */
            char c;
            while (read(fd, &c, 1) > 0 || errno == EINTR)
                ;
            break;
        }
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "-d") || !strcmp(argv[1], "-f")))
        return run_daemon(argv[1][1] == 'f');
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("Usage: nvidia-cuda-mps-control [-d | -f]\n"
               "  -d  start the MPS control daemon in the background\n"
               "  -f  start it in the foreground\n"
               "  (no option) send the commands read from stdin to the running daemon\n"
               "Simulated: see docs/mps.md of gpu-container-toolkit.\n");
        return 0;
    }
    if (argc != 1)
        return die("unknown option %s (usage: nvidia-cuda-mps-control [-d | -f])", argv[1], "argv");
    return run_ui();
}
