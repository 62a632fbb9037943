/* launcher_identity.c: the ELF note that marks every launcher (launcher.c puts it in the binary), and
 * the test whether a file carries it (cdi/launcher_identity.py is the Python twin, docs/c-twins.md). */
#ifndef GCT_LAUNCHER_IDENTITY_H
#define GCT_LAUNCHER_IDENTITY_H

#include <stdint.h>

#define GCT_LAUNCHER_NOTE_NAME "gpu-container-toolkit" /* 21 bytes + NUL: namesz 22, padded to 24 */
#define GCT_LAUNCHER_NOTE_DESC "launcher"              /* 8 bytes + NUL: descsz 9, padded to 12 */
#define GCT_LAUNCHER_NOTE_TYPE 0x4c544347u             /* "GCTL" */
#define GCT_NOTE_SCAN 65536
#define GCT_MAX_PHNUM 4096

/* The note as it is in the file (host byte order: a launcher is built for this host). */
struct gct_launcher_note {
    uint32_t namesz, descsz, type;
    char name[24];
    char desc[12];
};

#define GCT_LAUNCHER_NOTE_INIT                                                                             \
    {                                                                                                      \
        sizeof(GCT_LAUNCHER_NOTE_NAME), sizeof(GCT_LAUNCHER_NOTE_DESC), GCT_LAUNCHER_NOTE_TYPE,            \
            GCT_LAUNCHER_NOTE_NAME, GCT_LAUNCHER_NOTE_DESC                                                 \
    }

/* 1 if path (followed, as execve follows it) is a regular file that is one of our launchers. */
int gct_is_launcher(const char *path);

#endif
