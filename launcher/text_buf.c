/* A growing text for the launcher's outputs (an edited config.json, a cache key). */
#include <stdlib.h>
#include <string.h>

#include "text_buf.h"

void buf_add(struct buf *b, const char *s, size_t n)
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

void buf_str(struct buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}
