/* Opening a HOST binary to run inside a container's rootfs (the sandboxed ldconfig).
 *
 * The kernel resolves a script's interpreter and an ELF's PT_INTERP (the dynamic loader) by path at
 * exec time, and in the sandbox that path is inside the chroot: anything but a static executable
 * would run code from the image as root. So the binary is opened once, here, in the caller's
 * namespace, and refused (ENOEXEC) unless it is a static ELF executable. Ubuntu's /sbin/ldconfig
 * is a wrapper script next to the static /sbin/ldconfig.real: a script gives way to "<path>.real". */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

#define PT_INTERP_TYPE 3

static const char *const problem_texts[] = {
    [GCT_EXE_NOT_OPENED] = "it could not be opened",
    [GCT_EXE_STATIC] = "it is a static executable",
    [GCT_EXE_SCRIPT] = "it is a script, whose interpreter would be loaded from the container's rootfs",
    [GCT_EXE_DYNAMIC] = "it is dynamically linked, so the container's ld.so would load it",
    [GCT_EXE_NOT_ELF] = "it is not an ELF executable",
};

const char *gct_exe_problem_text(int problem)
{
    if (problem < 0 || problem >= (int)(sizeof(problem_texts) / sizeof(problem_texts[0])))
        return "unknown problem";
    return problem_texts[problem];
}

/* An unsigned field of `size` bytes at buf[off], in the file's byte order (big: 1). */
static uint64_t elf_field(const unsigned char *buf, size_t off, size_t size, int big)
{
    uint64_t value = 0;

    for (size_t i = 0; i < size; i++)
        value |= (uint64_t)buf[off + (big ? size - 1 - i : i)] << (8 * i);
    return value;
}

/* Whether any program header is PT_INTERP, reading the table entry by entry (an ELF header may
 * claim up to 65535 entries of 65535 bytes: nothing of that size is allocated). The whole table
 * must be in the file, as for the kernel. */
static int has_interp(int fd, uint64_t phoff, uint64_t phentsize, uint64_t phnum, int big)
{
    unsigned char type[4], last;

    if (pread(fd, &last, 1, (off_t)(phoff + phentsize * phnum - 1)) != 1)
        return -1;
    for (uint64_t i = 0; i < phnum; i++) {
        if (pread(fd, type, sizeof(type), (off_t)(phoff + i * phentsize)) != (ssize_t)sizeof(type))
            return -1;
        if (elf_field(type, 0, 4, big) == PT_INTERP_TYPE)
            return 1;
    }
    return 0;
}

/* GCT_EXE_* for the open regular file fd. */
static int classify(int fd)
{
    unsigned char head[64];
    uint64_t phoff, phentsize, phnum;
    int big, interp;

    ssize_t n = pread(fd, head, sizeof(head), 0);
    if (n >= 2 && head[0] == '#' && head[1] == '!')
        return GCT_EXE_SCRIPT;
    if (n < (ssize_t)sizeof(head) || memcmp(head, "\x7f" "ELF", 4) != 0 || (head[4] != 1 && head[4] != 2)
        || (head[5] != 1 && head[5] != 2))
        return GCT_EXE_NOT_ELF;
    big = head[5] == 2;
    if (head[4] == 2) {   /* ELFCLASS64 */
        phoff = elf_field(head, 32, 8, big);
        phentsize = elf_field(head, 54, 2, big);
        phnum = elf_field(head, 56, 2, big);
    } else {
        phoff = elf_field(head, 28, 4, big);
        phentsize = elf_field(head, 42, 2, big);
        phnum = elf_field(head, 44, 2, big);
    }
    /* the offsets must fit in an off_t whatever the header claims (phentsize * phnum < 2^32) */
    if (phentsize < 4 || phnum == 0 || phoff > (uint64_t)INT64_MAX / 2)
        return GCT_EXE_NOT_ELF;
    interp = has_interp(fd, phoff, phentsize, phnum, big);
    if (interp < 0)
        return GCT_EXE_NOT_ELF;
    return interp ? GCT_EXE_DYNAMIC : GCT_EXE_STATIC;
}

/* Opens path and classifies it; returns the fd of a static executable, else -1 with errno (and
 * check->problem set once the file is open). */
static int open_checked(const char *path, struct gct_exe_check *check)
{
    struct stat st;
    int fd;

    check->problem = GCT_EXE_NOT_OPENED;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0) {
        gct_close_keep_errno(fd);
        return -1;
    }
    check->problem = S_ISREG(st.st_mode) ? classify(fd) : GCT_EXE_NOT_ELF;
    if (check->problem == GCT_EXE_STATIC)
        return fd;
    close(fd);
    errno = ENOEXEC;
    return -1;
}

int gct_open_static_executable(const char *path, struct gct_exe_check *check)
{
    char real[sizeof(check->path)];
    struct stat st;
    int fd;

    memset(check, 0, sizeof(*check));
    if (strlen(path) >= sizeof(check->path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(check->path, path);
    /* each round is a wrapper script with a "<path>.real" next to it; the name grows by 5 each time */
    for (;;) {
        fd = open_checked(check->path, check);
        if (fd >= 0 || check->problem != GCT_EXE_SCRIPT)
            return fd;
        int n = snprintf(real, sizeof(real), "%s.real", check->path);
        if (n < 0 || (size_t)n >= sizeof(real) || stat(real, &st) < 0) {
            errno = ENOEXEC;   /* no .real: the script itself is what is refused */
            return -1;
        }
        strcpy(check->path, real);
    }
}
