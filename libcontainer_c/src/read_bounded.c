/* The one bounded reader of a file descriptor: nvidia-cdi-hook's OCI state and config.json, and the
 * ld.so.cache ldconfig built on the scratch tmpfs (ld_cache.c). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

#define READ_CHUNK (64 * 1024)

int gct_read_bounded(int fd, size_t max, char **data, size_t *len)
{
    size_t cap = 0, n = 0;
    char *buf = NULL;

    for (;;) {
        if (n == cap) {
            if (cap == max + 1)
                break;
            /* never past max + 1: the buffer must not grow beyond it and then shrink under n */
            cap = cap * 2 + READ_CHUNK > max + 1 ? max + 1 : cap * 2 + READ_CHUNK;
            char *grown = realloc(buf, cap);
            if (grown == NULL)
                goto fail;
            buf = grown;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            goto fail;
        if (got == 0)
            break;
        n += (size_t)got;
    }
    *data = buf;
    *len = n;
    return 0;
fail:
    free(buf);
    return -1;
}
