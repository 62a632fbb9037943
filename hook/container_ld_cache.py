"""Whether a container's /etc/ld.so.cache already leads every injected driver library to the place the
injection puts it, so that the sandboxed ldconfig need not run again.

    if not lists_exactly(root, {"libcuda.so.1": ["/usr/lib/x86_64-linux-gnu/libcuda.so.1"]}): run ldconfig

Why: a restarted container reuses its rootfs, and the cache ldconfig wrote at its first start is still
there. Running it again (~4 ms here: a forked sandbox, a scan of every library folder of the image, a
new cache written, fsynced and renamed) would write the same entries for the driver's libraries.

The rule: for every soname the injection brings, the cache's entries of that soname are exactly the
paths ldconfig gives them (folder/soname, one per folder the soname is injected into): nothing else is
found first, nothing is missing. The entries lead to the links the injection makes at every start,
so they stay right across a driver update of the same sonames. Anything else runs ldconfig as before:
no cache, a link or a special file there, a file over MAX_BYTES, one that does not parse, another entry
for one of the sonames, a library without a soname (hook.inject passes no rule then), the image's
CUDA compat folder in use (hook.cdi_hook: it orders the cache).

What this does not refresh: entries of the image's own libraries that the container changed without
running ldconfig itself stay as it left them (NVIDIA's hook runs ldconfig at every start, which would
rewrite those too).

The file is the image's: it is opened inside the root (libcontainer_c.rootfs: openat2 with
RESOLVE_IN_ROOT, the last component not followed), O_PATH first so that a FIFO or device there is
never opened, checked to be a regular file, read through /proc/self/fd, and parsed by cdi.ldcache,
which checks every offset of a file it does not trust.
"""
from __future__ import annotations

import os
import stat

LD_SO_CACHE = "/etc/ld.so.cache"
# An image's cache is well under a megabyte; past this, ldconfig just runs. Below cdi.ldcache's
# MAX_CACHE_SIZE (64 MiB, for the host's cache, which we trust) on purpose: this file is the image's,
# read as root at every start, and a miss only costs an ldconfig run.
MAX_BYTES = 16 << 20


def lists_exactly(root, entries: dict[str, list[str]]) -> bool:
    """True when the cache of `root` (an open libcontainer_c.rootfs.Rootfs) has, for each soname in
    `entries`, exactly the paths listed for it; False otherwise, and for any problem reading it."""
    data = _read_cache(root)
    if data is None or not entries:
        return False
    from cdi.ldcache import LdCacheError, parse_ld_cache

    try:
        cached = parse_ld_cache(data, LD_SO_CACHE)
    except LdCacheError:
        return False
    found: dict[str, set[str]] = {}
    for entry in cached:
        if entry.soname in entries:
            found.setdefault(entry.soname, set()).add(entry.path)
    return all(found.get(soname) == set(paths) for soname, paths in entries.items())


def _read_cache(root) -> bytes | None:
    from cdi.regular_file import read_regular_file
    from libcontainer_c.errors import ContainerFsError

    try:
        path_fd = root.open(LD_SO_CACHE, os.O_PATH | os.O_NOFOLLOW)
    except ContainerFsError:
        return None
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        # /proc/self/fd/N leads to the very file checked above, not to a path looked up again in the
        # root; read_regular_file reads it without blocking and never past MAX_BYTES + 1
        data, _ = read_regular_file(f"/proc/self/fd/{path_fd}", MAX_BYTES)
        return data
    except (OSError, ValueError):
        return None
    finally:
        os.close(path_fd)
