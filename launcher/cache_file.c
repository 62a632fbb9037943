/*
 * The launcher's cache files (the runtime cache, runtime_shim/runtime_cache.py, and the create cache,
 * runtime_shim/create_cache.py): lines "<key> <value>" sealed by an end line with the body's length and
 * checksum, read only when ours and whole; and the bundle's config.json, read once for both of the
 * launcher's looks at it.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cache_file.h"

#define SHIM_SPEC_SCAN_MAX (4 * 1024 * 1024)

/* Calls fn for every line "<key> <value>" (or "<key>" alone: value empty) of a cache text; stops at,
 * and returns, fn's first nonzero answer. The one walker of the launcher's cache files. */
int each_line(const char *text, const char *key, int (*fn)(void *, const char *, size_t), void *arg)
{
    size_t len = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t line_len = end ? (size_t)(end - line) : strlen(line);
        if (line_len >= len && strncmp(line, key, len) == 0 && (line_len == len || line[len] == ' ')) {
            int r = line_len == len ? fn(arg, line + len, 0) : fn(arg, line + len + 1, line_len - len - 1);
            if (r)
                return r;
        }
        line = end ? end + 1 : NULL;
    }
    return 0;
}

static int any_line(void *arg, const char *value, size_t len)
{
    (void)arg, (void)value, (void)len;
    return 1;
}

/* Whether text has a line "<key> ..." (or "<key>" alone). */
int has_key(const char *text, const char *key)
{
    return each_line(text, key, any_line, NULL);
}

/* config.json in bundle (NULL: the cwd), read whole once for both of the launcher's looks at it:
 * a regular file, not a symlink (O_NOFOLLOW: Python refuses one), at most SHIM_SPEC_SCAN_MAX bytes, no
 * backslash (a JSON escape could spell anything). NUL-terminated and malloc'd, or NULL: Python decides. */
char *read_bundle_config(const char *bundle, size_t *len, struct stat *st)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/config.json", bundle && bundle[0] ? bundle : ".");
    if (n < 0 || (size_t)n >= sizeof(path))
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    char *data = NULL;
    size_t total = 0;
    if (fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_size > 0 && st->st_size <= SHIM_SPEC_SCAN_MAX &&
        (data = malloc((size_t)st->st_size + 1))) {
        ssize_t got;
        while (total < (size_t)st->st_size && (got = read(fd, data + total, (size_t)st->st_size - total)) > 0)
            total += (size_t)got;
        if (total != (size_t)st->st_size || memchr(data, '\\', total)) {
            free(data);
            data = NULL;
        } else {
            data[total] = '\0';
        }
    }
    close(fd);
    *len = total;
    return data;
}

const char *env_value(char **envp, const char *key)
{
    size_t len = strlen(key);
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], key, len) == 0 && envp[i][len] == '=')
            return envp[i] + len + 1;
    return NULL;
}

const char *nonempty(const char *value)
{
    return value && value[0] ? value : NULL;
}

/* FNV-1a, 64 bits: the cache file's name for a config path (runtime_shim/runtime_cache.py agrees). */
uint64_t fnv1a64(const char *text)
{
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        hash ^= *p;
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

/* The checksum of a cache file's end line (runtime_cache.seal_checksum agrees): FNV-1a's steps on 64-bit
 * little-endian words, the last one zero-padded (the end line's length tells the padding apart). A
 * changed word always changes it (each step is a bijection of the hash), and one multiply per 8 bytes
 * instead of per byte makes a 20 KB create cache entry ~5x cheaper to check. */
static uint64_t seal_checksum(const char *data, size_t len)
{
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t word = 0;
        memcpy(&word, data + i, len - i < 8 ? len - i : 8);
        hash ^= le64toh(word);
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

/* A stat time in nanoseconds, as Python's st_*_ns. */
long long ns_of(struct timespec t)
{
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The length of a cache file's body when its last line is "end <length of the body> <seal_checksum of
 * the body, 16 hex digits>" (runtime_cache.seal) and both are right; -1 otherwise. A file cut short (at a
 * line boundary or not) has no end line, and a changed byte changes the checksum: such a file is
 * not used at all, whatever its lines would still say. */
static ssize_t sealed_body(const char *data, size_t len)
{
    if (len < 2 || data[len - 1] != '\n')
        return -1;
    size_t start = len - 1;
    while (start > 0 && data[start - 1] != '\n')
        start--;
    char expected[64];
    int n = snprintf(expected, sizeof(expected), "end %zu %016llx\n", start,
                     (unsigned long long)seal_checksum(data, start));
    return start > 0 && n > 0 && (size_t)n == len - start && memcmp(data + start, expected, (size_t)n) == 0 &&
                   !memchr(data, '\0', start)   /* never written: the lines are read as C strings */
               ? (ssize_t)start
               : -1;
}

/* The body of a cache file (sealed_body), NUL-terminated, if the file is ours (a regular file owned by
 * our euid that no one else can write) and whole. Returns the body's length, or -1. */
ssize_t read_cache(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct stat st;
    ssize_t total = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        !(st.st_mode & (S_IWGRP | S_IWOTH)) && st.st_size > 0 && (size_t)st.st_size < size) {
        total = 0;
        ssize_t n;
        while ((n = read(fd, buf + total, size - 1 - (size_t)total)) > 0)
            total += n;
        total = n < 0 ? -1 : sealed_body(buf, (size_t)total);
        if (total >= 0)
            buf[total] = '\0';
    }
    close(fd);
    return total;
}

struct field_copy {
    char *out;
    size_t size;
};

/* A line's value as a C string in out; -1 when it does not fit. */
int value_cstr(const char *value, size_t len, char *out, size_t size)
{
    if (len >= size)
        return -1;
    memcpy(out, value, len);
    out[len] = '\0';
    return 0;
}

static int copy_value(void *arg, const char *value, size_t len)
{
    struct field_copy *copy = arg;
    return value_cstr(value, len, copy->out, copy->size) ? -1 : 1;
}

/* The value of the (first) line "key value" in the cache text, copied into out; -1 if absent. */
int cache_field(const char *text, const char *key, char *out, size_t size)
{
    struct field_copy copy = { out, size };
    return each_line(text, key, copy_value, &copy) == 1 ? 0 : -1;
}
