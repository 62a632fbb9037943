/* What the simulated MPS control daemon (mps_control.c) and the simulated CUDA client (mps_client.c)
 * share: where the daemon listens and how a connection says what it is.
 *
 * The daemon listens on a unix stream socket `control` in the pipe directory
 * ($CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps). A connection's first line names its role:
 *   "ui\n"      the control program (`nvidia-cuda-mps-control` without -d): then one command per line,
 *               each answered by its output followed by one NUL byte;
 *   "client\n"  a CUDA program: the daemon finds or starts the server for the peer's uid (read from
 *               the socket, SO_PEERCRED, never from what the peer says) and answers lines
 *               "server <pid>", "active_thread_percentage <p>", "device <index> <name> <bytes>", "end",
 *               or one line "error <text>".
 * NVIDIA does not document its wire format; this one is ours (docs/mps.md). */
#ifndef MPS_PROTOCOL_H
#define MPS_PROTOCOL_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MPS_DEFAULT_PIPE_DIRECTORY "/tmp/nvidia-mps"
#define MPS_DEFAULT_LOG_DIRECTORY "/var/log/nvidia-mps"
#define MPS_CONTROL_SOCKET "control"
#define MPS_MAX_DEVICES 64

static inline const char *mps_pipe_directory(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return dir && *dir ? dir : MPS_DEFAULT_PIPE_DIRECTORY;
}

/* The address of `name` in `dir_fd`'s directory: through /proc/self/fd, so that a long pipe
 * directory cannot exceed the 108 bytes of sun_path. */
static inline int mps_socket_address(int dir_fd, const char *name, struct sockaddr_un *addr)
{
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    int n = snprintf(addr->sun_path, sizeof addr->sun_path, "/proc/self/fd/%d/%s", dir_fd, name);
    return n > 0 && (size_t)n < sizeof addr->sun_path ? 0 : -1;
}

/* A connected socket to the daemon of `pipe_dir`, or -1 (errno set). */
static inline int mps_connect(const char *pipe_dir)
{
    int dir_fd = open(pipe_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0)
        return -1;
    struct sockaddr_un addr;
    int fd = -1;
    if (mps_socket_address(dir_fd, MPS_CONTROL_SOCKET, &addr) == 0) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            int err = errno;
            close(fd);
            fd = -1;
            errno = err;
        }
    }
    int err = errno;
    close(dir_fd);
    errno = err;
    return fd;
}

static inline int mps_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Pinned memory sizes as the control commands take them: a number with an optional K, M, G or T
 * (binary units, either case). Returns 0 and the bytes, or -1. */
static inline int mps_parse_size(const char *text, unsigned long long *bytes)
{
    char *end;
    errno = 0;
    if (!*text || *text == '-')
        return -1;
    unsigned long long n = strtoull(text, &end, 10);
    if (errno || end == text)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end || (shift && n > (~0ULL >> shift)))
        return -1;
    *bytes = n << shift;
    return 0;
}

/* The largest unit that writes `bytes` exactly: 20G, 512M, 3K, or a plain number. */
static inline void mps_format_size(unsigned long long bytes, char *out, size_t size)
{
    static const char units[] = "TGMK";
    for (int i = 0; i < 4; i++) {
        unsigned shift = 40 - 10 * (unsigned)i;
        if (bytes && bytes % (1ULL << shift) == 0) {
            snprintf(out, size, "%llu%c", bytes >> shift, units[i]);
            return;
        }
    }
    snprintf(out, size, "%llu", bytes);
}

#endif
