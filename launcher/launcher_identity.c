/*
 * Whether a file is one of this toolkit's launchers, by its content: every launcher carries an ELF note
 * (name "gpu-container-toolkit", type GCT_LAUNCHER_NOTE_TYPE, desc "launcher") in a PT_NOTE segment,
 * defined in launcher.c.
 *
 * Why: the runtime shim execs a low-level runtime, and when that runtime is a launcher too (a `runc` in
 * PATH that is a symlink, hard link or copy of nvidia-container-runtime, its .cdi/.legacy names, another
 * installation's copy, a path in config.toml's `runtimes`) each one execs the next for ever. A file
 * name or an inode comparison misses copies and other installations; the note is in all of them and
 * in no other program. runtime_shim/executable.py reads the same note (same bytes) for the Python side,
 * and the tests hold both to the same files.
 *
 * Only the program headers and the note segments are read (at most GCT_NOTE_SCAN bytes each), with
 * pread: a crafted header can make neither allocate nor read much.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher_identity.h"

static uint64_t gct_elf_field(const unsigned char *buf, size_t size, int big)
{
    uint64_t value = 0;
    for (size_t i = 0; i < size; i++)
        value |= (uint64_t)buf[big ? size - 1 - i : i] << (8 * i);
    return value;
}

/* 1 if the open file fd has our note in a PT_NOTE segment, else 0 (not ELF, unreadable, no note). */
static int gct_fd_is_launcher(int fd)
{
    static const struct gct_launcher_note want = GCT_LAUNCHER_NOTE_INIT;
    unsigned char head[64], ph[56];
    if (pread(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) || memcmp(head, "\x7f" "ELF", 4) != 0)
        return 0;
    int is64 = head[4] == 2, big = head[5] == 2;
    if ((head[4] != 1 && head[4] != 2) || (head[5] != 1 && head[5] != 2))
        return 0;
    uint64_t phoff = gct_elf_field(head + (is64 ? 32 : 28), is64 ? 8 : 4, big);
    uint64_t phentsize = gct_elf_field(head + (is64 ? 54 : 42), 2, big);
    uint64_t phnum = gct_elf_field(head + (is64 ? 56 : 44), 2, big);
    size_t entry = is64 ? 56 : 32;
    if (phentsize < entry || phnum == 0 || phnum > GCT_MAX_PHNUM || phoff > (uint64_t)INT64_MAX / 2)
        return 0;
    char *notes = malloc(GCT_NOTE_SCAN);
    if (!notes)
        return 0;
    int found = 0;
    for (uint64_t i = 0; i < phnum && !found; i++) {
        if (pread(fd, ph, entry, (off_t)(phoff + i * phentsize)) != (ssize_t)entry)
            break;
        if (gct_elf_field(ph, 4, big) != 4 /* PT_NOTE */)
            continue;
        uint64_t offset = gct_elf_field(ph + (is64 ? 8 : 4), is64 ? 8 : 4, big);
        uint64_t filesz = gct_elf_field(ph + (is64 ? 32 : 16), is64 ? 8 : 4, big);
        if (offset > (uint64_t)INT64_MAX / 2)
            continue;
        size_t want_bytes = filesz < GCT_NOTE_SCAN ? (size_t)filesz : GCT_NOTE_SCAN;
        ssize_t got = pread(fd, notes, want_bytes, (off_t)offset);
        found = got >= (ssize_t)sizeof(want) && memmem(notes, (size_t)got, &want, sizeof(want)) != NULL;
    }
    free(notes);
    return found;
}

/* 1 if path (followed, as execve follows it) is a regular file that is one of our launchers. */
int gct_is_launcher(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return 0;
    struct stat st;
    int is = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && gct_fd_is_launcher(fd);
    close(fd);
    return is;
}
