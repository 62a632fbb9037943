/* gct-cuda-mps-client: the simulated host's stand-in for a CUDA program under MPS. It does what the
 * CUDA driver does at cuInit: connect to the MPS control daemon of $CUDA_MPS_PIPE_DIRECTORY (default
 * /tmp/nvidia-mps), which finds or starts the server of the caller's user id, and take the limits of
 * that server. Then it applies the client's own environment as NVIDIA documents it: a
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE or CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=1G,1=2G") only ever
 * lowers the daemon's limit. It prints, one per line:
 *     pipe_directory=<dir>
 *     server_pid=<pid>
 *     daemon_active_thread_percentage=<p>
 *     active_thread_percentage=<p>                      (what the client runs with)
 *     device=<index> name=<CUDA_VISIBLE_DEVICES entry of the daemon or -> pinned_mem_limit=<bytes> daemon_pinned_mem_limit=<bytes>
 * Exit 0; 1 with one line on stderr when no daemon answers (a real CUDA program would then run
 * without MPS; a test wants to know). Named gct-* as it is ours: no NVIDIA driver ships it. */
#include "mps_protocol.h"

static const char *prog = "gct-cuda-mps-client";

static int fail(const char *what, const char *where)
{
    fprintf(stderr, "%s: error: %s (%s)\n", prog, what, where);
    return 1;
}

/* The client's own pinned limit for `dev` from CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, 0 when none. */
static unsigned long long own_pinned_limit(const char *env, int dev)
{
    if (!env)
        return 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", env);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        unsigned long long bytes;
        if (!eq)
            continue;
        *eq = 0;
        char *end;
        long index = strtol(tok, &end, 10);
        if (*tok && !*end && index == dev && mps_parse_size(eq + 1, &bytes) == 0)
            return bytes;
    }
    return 0;
}

int main(int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        printf("Usage: %s\n  connects to the MPS control daemon of $CUDA_MPS_PIPE_DIRECTORY as a CUDA program "
               "does and prints the limits it runs with\n", prog);
        return argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? 0 : 2;
    }
    const char *pipe_dir = mps_pipe_directory();
    char where[4200];
    snprintf(where, sizeof where, "%s/%s", pipe_dir, MPS_CONTROL_SOCKET);
    int fd = mps_connect(pipe_dir);
    if (fd < 0)
        return fail("no MPS control daemon answers", where);
    if (mps_write_all(fd, "client\n", 7) != 0)
        return fail("the daemon closed the connection", where);
    char reply[16384];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, reply + have, sizeof reply - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        reply[have] = 0;
        if (strstr(reply, "\nend\n") || !strncmp(reply, "error ", 6) || have == sizeof reply - 1)
            break;
    }
    close(fd);
    reply[have] = 0;
    if (!strncmp(reply, "error ", 6)) {
        char *nl = strchr(reply, '\n');
        if (nl)
            *nl = 0;
        return fail(reply + 6, where);
    }
    if (!strstr(reply, "\nend\n"))
        return fail("the daemon's answer is incomplete", where);

    const char *own_pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    const char *own_pinned = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    printf("pipe_directory=%s\n", pipe_dir);
    char *save = NULL;
    for (char *line = strtok_r(reply, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        long pid;
        double pct;
        int dev;
        char name[128];
        unsigned long long bytes;
        if (sscanf(line, "server %ld", &pid) == 1) {
            printf("server_pid=%ld\n", pid);
        } else if (sscanf(line, "active_thread_percentage %lf", &pct) == 1) {
            double mine = pct;
            char *end;
            if (own_pct && *own_pct) {
                double asked = strtod(own_pct, &end);
                if (!*end && asked > 0 && asked < pct)   /* it may lower the daemon's limit, never raise it */
                    mine = asked;
            }
            printf("daemon_active_thread_percentage=%.1f\nactive_thread_percentage=%.1f\n", pct, mine);
        } else if (sscanf(line, "device %d %127s %llu", &dev, name, &bytes) == 3) {
            unsigned long long asked = own_pinned_limit(own_pinned, dev), mine = bytes;
            if (asked && (!bytes || asked < bytes))
                mine = asked;
            printf("device=%d name=%s pinned_mem_limit=%llu daemon_pinned_mem_limit=%llu\n", dev, name, mine, bytes);
        }
    }
    return 0;
}
