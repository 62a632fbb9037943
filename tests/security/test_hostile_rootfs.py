"""A rootfs full of hostile symlinks never makes the C helper create or mount anything outside it.

The "host" is a temp dir next to the rootfs (plus a unique name at the real /, for `/etc -> /`). Each
hostile entry is used as a path, as a parent dir and as a mount target by every rootfs operation; the
operation may fail or land inside the root, and afterwards the host dir, the real / and the mount
table (outside the root) must be exactly as before. Everything runs in a private mount namespace.
"""
import os
import uuid

import pytest

from libcontainer_c.errors import ContainerFsError
from libcontainer_c.rootfs import LIBRARY, READONLY_FILES, Rootfs
from tests.support.mountns import (mountinfo_lines, process_in_mount_ns, run_in_private_mount_ns,
                                   tree_listing)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount tests need root")


def hostile_links(host):
    """name -> target of symlinks that point (for a naive, path-string resolver) at the host."""
    climb = "../" * 12 + str(host).lstrip("/")
    return {
        "etc": "/",                               # absolute to the host root
        "abshost": str(host),                     # absolute to the host dir
        "climb": climb,                           # ..-climbing relative link
        "lib": "/../../" + str(host).lstrip("/"),  # absolute with .. at the top
        "sibling": "../host",                     # the host dir sits next to the rootfs
        "loop1": "loop2", "loop2": "loop1",       # a loop
        "magic": "/proc/self/root" + str(host),   # a magic link through procfs
        "magicfd": "/proc/self/cwd",
        "usr/lib": str(host),                     # a symlinked parent directory
        "usr/lib64": "../../../../" + str(host).lstrip("/"),
        "dev/nvidia0": str(host / "victim"),      # a placeholder that is a link to a host file
    }


def build_rootfs(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "victim").write_text("host file")
    (host / "subdir").mkdir()
    root = tmp_path / "rootfs"
    for sub in ("usr", "dev", "proc"):
        (root / sub).mkdir(parents=True)
    for name, target in hostile_links(host).items():
        os.symlink(target, root / name)
    # a decoy at the host dir's path INSIDE the root: clamped links land here and the ops succeed
    (root / str(host).lstrip("/") / "subdir").mkdir(parents=True)
    src = tmp_path / "source"
    (src / "dir").mkdir(parents=True)
    (src / "dir/payload").write_text("payload")
    (src / "lib.so").write_bytes(b"\x7fELF payload")
    return host, root, src


def attack(host, root_path, src, unique):
    """Every operation against every hostile entry; returns what happened and the mount diff."""
    outcomes = []
    with Rootfs(root_path) as root:
        # a real procfs inside the root, so that the magic links have something to point through
        proc = root.bind("/proc", "/proc", READONLY_FILES)
        before = mountinfo_lines()
        mounts = []
        for entry in hostile_links(host):
            base = "/" + entry
            ops = {
                "make_file": lambda p=base: os.close(root.make_file(p + "/" + unique)),
                "make_file_on_link": lambda p=base: os.close(root.make_file(p)),
                "make_dir": lambda p=base: os.close(root.make_dir(p + "/" + unique + ".d")),
                "mkdirs": lambda p=base: root.mkdirs(p + "/" + unique + ".p/a/b"),
                "symlink": lambda p=base: root.symlink("x", p + "/" + unique + ".l"),
                "symlink_over_link": lambda p=base: root.symlink("x", p + "/subdir"),
                "bind_file": lambda p=base: mounts.append(
                    root.bind(str(src / "lib.so"), p + "/" + unique + ".so", LIBRARY)),
                "bind_dir": lambda p=base: mounts.append(
                    root.bind(str(src / "dir"), p + "/" + unique + ".bd", READONLY_FILES)),
                "bind_dir_on_existing": lambda p=base: mounts.append(
                    root.bind(str(src / "dir"), p + "/subdir", READONLY_FILES)),
                "tmpfs": lambda p=base: mounts.append(root.mount_tmpfs(p + "/" + unique + ".t")),
            }
            for name, op in ops.items():
                try:
                    op()
                    outcomes.append((entry, name, "ok"))
                except ContainerFsError as err:
                    outcomes.append((entry, name, err.errno))
        new_mounts = [line.split()[2] for line in mountinfo_lines() - before]
        inside = sorted(os.listdir(root_path)) + sorted(os.listdir(root_path / str(host).lstrip("/")))
        for m in reversed(mounts):
            m.unmount()
        proc.unmount()
    return outcomes, new_mounts, inside


def test_hostile_symlinks_never_escape(tmp_path):
    unique = f"gct-escape-{uuid.uuid4().hex[:8]}"
    machine_mounts = mountinfo_lines()
    host, root, src = build_rootfs(tmp_path)
    host_before = tree_listing(host)

    outcomes, new_mounts, inside = run_in_private_mount_ns(attack, host, root, src, unique)

    # nothing appeared in or changed below the host dir, nor at the real /
    assert tree_listing(tmp_path / "host") == host_before
    assert not [n for n in os.listdir("/") if n.startswith(unique)]
    assert (tmp_path / "host/victim").read_text() == "host file"
    # every mount made during the attack is inside the rootfs
    rootfs = str(tmp_path / "rootfs")
    assert new_mounts, "the attack mounted nothing: the test is not exercising mounts"
    for point in new_mounts:
        assert point.startswith(rootfs + "/"), point
    # the machine's mount table is unchanged
    assert mountinfo_lines() == machine_mounts

    results = {(entry, op): result for entry, op, result in outcomes}
    # magic links are refused, loops fail, a link as the placeholder itself is refused
    assert results[("magic", "make_file")] == 40  # ELOOP
    assert results[("magicfd", "mkdirs")] == 40
    assert results[("loop1", "make_dir")] == 40
    assert results[("dev/nvidia0", "make_file_on_link")] == 40
    # absolute and climbing links are clamped at the root: the operation lands inside it
    assert results[("etc", "make_file")] == "ok" and unique in inside and unique + ".so" in inside
    assert results[("etc", "bind_file")] == "ok"
    assert results[("etc", "bind_dir")] == "ok"
    for entry in ("abshost", "climb", "lib", "usr/lib", "usr/lib64"):
        for op in ("make_file", "mkdirs", "symlink", "bind_file", "bind_dir", "bind_dir_on_existing", "tmpfs"):
            assert results[(entry, op)] == "ok", (entry, op, results[(entry, op)])
    assert results[("sibling", "make_file")] == 2  # ENOENT: ../host is clamped to the missing /host


def test_hostile_symlinks_in_a_live_container(tmp_path):
    """The same rootfs behind a live mount namespace (with a real procfs inside), attacked through
    RootfsBatch, the way the prestart hook injects."""
    import subprocess

    from libcontainer_c.batch import BatchError, RootfsBatch

    unique = f"gct-escape-{uuid.uuid4().hex[:8]}"
    machine_mounts = mountinfo_lines()
    host, root, src = build_rootfs(tmp_path)
    host_before = tree_listing(host)
    with process_in_mount_ns(proc_at=root / "proc") as pid:
        results = {}
        for entry in hostile_links(host):
            base = "/" + entry
            attempts = {
                "write_file": lambda b, p=base: b.write_file(p + "/" + unique, "x"),
                "write_over_link": lambda b, p=base: b.write_file(p, "x"),
                "bind_file": lambda b, p=base: b.bind(str(src / "lib.so"), p + "/" + unique + ".so", LIBRARY),
                "bind_dir": lambda b, p=base: b.bind(str(src / "dir"), p + "/subdir", READONLY_FILES),
                "tmpfs": lambda b, p=base: b.tmpfs(p + "/" + unique + ".t"),
                "symlink": lambda b, p=base: b.symlink("x", p + "/" + unique + ".l"),
            }
            for name, add in attempts.items():
                with RootfsBatch() as batch:
                    add(batch)
                    try:
                        batch.run(rootfs=root, pid=pid)
                        results[(entry, name)] = "ok"
                    except BatchError as err:
                        results[(entry, name)] = err.errno
        info = subprocess.run(["nsenter", "-t", str(pid), "-m", "cat", "/proc/self/mountinfo"],
                              capture_output=True, text=True, check=True).stdout

    assert tree_listing(host) == host_before
    assert (host / "victim").read_text() == "host file"
    assert not [n for n in os.listdir("/") if n.startswith(unique)]
    assert mountinfo_lines() == machine_mounts
    points = [line.split()[4] for line in info.splitlines()]
    ours = [p for p in points if unique in p or p.endswith("/subdir")]
    assert ours, "no mount landed: the test is not exercising mounts"
    assert all(p.startswith(str(root) + "/") for p in ours), ours
    assert results[("magic", "write_file")] == 40            # ELOOP: magic link refused
    assert results[("dev/nvidia0", "write_over_link")] == 17  # EEXIST: never written through
    assert results[("etc", "write_file")] == "ok"            # clamped: lands in the root
    assert (root / unique).read_text() == "x"


def _shared_volume_attack(base, unique):
    """In a private "host" namespace: a volume mounted shared into a live container, and an image
    symlink that leads a library target into it. Returns what the host sees and the batch error."""
    import ctypes
    import subprocess

    from libcontainer_c.batch import BatchError, RootfsBatch

    libc = ctypes.CDLL(None, use_errno=True)
    vol, root = base / "hostvol", base / "rootfs"
    for flags in (0x1000, 1 << 20):  # MS_BIND, then MS_SHARED: the volume is a shared mount
        assert libc.mount(str(vol).encode(), str(vol).encode(), None, flags, None) == 0
    with process_in_mount_ns(propagation="unchanged") as pid:
        # the runtime binds the volume into the container (a peer of the host's volume mount)
        subprocess.run(["nsenter", "-t", str(pid), "-m", "mount", "-n", "--bind", str(vol),
                        str(root / "vol")], check=True)
        batch = RootfsBatch()
        batch.bind(str(base / "lib.so"), f"/usr/lib/{unique}.so", LIBRARY)  # /usr/lib -> /vol
        try:
            batch.run(rootfs=root, pid=pid)
            error = None
        except BatchError as err:
            error = (err.errno, err.operation, err.filename)
        finally:
            batch.close()
        with open("/proc/self/mountinfo") as f:
            host_sees = [line.split()[4] for line in f if unique in line]
        return error, host_sees, sorted(os.listdir(vol))


def test_mount_never_propagates_to_the_host_through_a_shared_volume(tmp_path):
    unique = f"gct-shared-{uuid.uuid4().hex[:8]}"
    (tmp_path / "hostvol").mkdir()
    (tmp_path / "rootfs/vol").mkdir(parents=True)
    (tmp_path / "rootfs/usr").mkdir()
    os.symlink("/vol", tmp_path / "rootfs/usr/lib")
    (tmp_path / "lib.so").write_bytes(b"\x7fELF lib")
    error, host_sees, listing = run_in_private_mount_ns(_shared_volume_attack, tmp_path, unique)
    assert error is not None and error[0] == 18, error   # EXDEV: refused, target on a shared mount
    assert "shared mount" in error[1]
    assert host_sees == []
    # the placeholder itself was made (an empty file in the volume), nothing was mounted over it
    assert listing in ([], [f"{unique}.so"])


# --- Racing the batch's shared inodes (the file mount targets and links made as hard links) ---------
#
# A process in the container may change the rootfs between any two system calls of the batch child.
# To make a race land deterministically, the batch runs in a subprocess with an LD_PRELOAD shim around
# openat/linkat/symlinkat: on the first call of the given kind for the given name (before or after the
# real call) it runs a shell script, the racer, in the child's mount namespace. The racer gets $ROOT;
# $PPID in the script is the batch child itself.

RACE_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int fired;

static void race(const char *call, const char *when, const char *name)
{
    const char *on = getenv("GCT_RACE_ON"), *at = getenv("GCT_RACE_NAME"), *w = getenv("GCT_RACE_WHEN");
    const char *script = getenv("GCT_RACE_SCRIPT");
    const char *base = strrchr(name, '/');
    int saved = errno;

    base = base ? base + 1 : name;
    if (fired || !on || !at || !w || !script || strcmp(on, call) || strcmp(w, when) || strcmp(base, at))
        return;
    fired = 1;
    unsetenv("LD_PRELOAD");
    if (system(script) != 0)
        abort();   /* a racer that did not do its part: the test would prove nothing */
    errno = saved;
}

int symlinkat(const char *target, int dirfd, const char *name)
{
    int (*real)(const char *, int, const char *) = dlsym(RTLD_NEXT, "symlinkat");
    int rc;

    race("symlinkat", "before", name);
    rc = real(target, dirfd, name);
    if (rc == 0)
        race("symlinkat", "after", name);
    return rc;
}

int linkat(int olddirfd, const char *oldname, int newdirfd, const char *newname, int flags)
{
    int (*real)(int, const char *, int, const char *, int) = dlsym(RTLD_NEXT, "linkat");
    int rc;

    race("linkat", "before", newname);
    rc = real(olddirfd, oldname, newdirfd, newname, flags);
    if (rc == 0)
        race("linkat", "after", newname);
    return rc;
}

int openat(int dirfd, const char *name, int flags, ...)
{
    int (*real)(int, const char *, int, ...) = dlsym(RTLD_NEXT, "openat");
    unsigned int mode = 0;
    va_list ap;
    int fd;

    if (flags & (O_CREAT | __O_TMPFILE)) {
        va_start(ap, flags);
        mode = va_arg(ap, unsigned int);
        va_end(ap);
    }
    fd = real(dirfd, name, flags, mode);
    if (fd >= 0 && (flags & O_CREAT))
        race("openat", "after", name);
    return fd;
}
"""

RACE_RUNNER = r"""
import json, sys
from libcontainer_c.batch import BatchError, RootfsBatch
from libcontainer_c.rootfs import LIBRARY
spec = json.loads(sys.argv[1])
with RootfsBatch() as batch:
    for kind, a, b in spec["ops"]:
        if kind == "bind":
            batch.bind(a, b, LIBRARY)
        else:
            batch.symlink(a, b)
    try:
        batch.run(rootfs=spec["rootfs"], pid=spec["pid"])
        print(json.dumps(None))
    except BatchError as err:
        print(json.dumps([err.errno, err.filename]))
"""


@pytest.fixture(scope="module")
def race_shim(tmp_path_factory):
    import subprocess

    work = tmp_path_factory.mktemp("race-shim")
    (work / "shim.c").write_text(RACE_SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(work / "shim.so"), str(work / "shim.c"), "-ldl"],
                   check=True)
    return work / "shim.so"


def run_raced_batch(shim, rootfs, pid, ops, on, name, when, script):
    """Run ops (("bind", host source, path) or ("symlink", text, path)) in a batch whose child meets
    the racer `script` at the first `on` call (openat/linkat/symlinkat) for `name`, `when` (before/after)
    the real call. Returns None or (errno, path) of the batch's error; fails if the racer never ran."""
    import json
    import subprocess
    import sys

    fired = rootfs.parent / "racer-ran"
    env = dict(os.environ, LD_PRELOAD=str(shim), PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               GCT_RACE_ON=on, GCT_RACE_NAME=name, GCT_RACE_WHEN=when, ROOT=str(rootfs),
               GCT_RACE_SCRIPT=f"set -e\n{script}\ntouch {fired}\n")
    out = subprocess.run([sys.executable, "-c", RACE_RUNNER,
                          json.dumps({"ops": ops, "rootfs": str(rootfs), "pid": pid})],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert fired.exists(), "the racer never ran: the test is not racing anything"
    fired.unlink()
    result = json.loads(out)
    return None if result is None else tuple(result)


@pytest.fixture
def racy_container(tmp_path):
    """(pid, rootfs, libs) of a stand-in container; libs: host library files by name."""
    rootfs = tmp_path / "rootfs"
    for folder in ("usr/lib", "usr/lib32", "etc"):
        (rootfs / folder).mkdir(parents=True)
    libs = {}
    for name in ("a", "b", "c"):
        libs[name] = tmp_path / f"lib{name}.so"
        libs[name].write_bytes(f"\x7fELF lib{name}".encode())
    with process_in_mount_ns() as pid:
        yield pid, rootfs, libs


def seen_inside(pid, path) -> str:
    import subprocess

    return subprocess.run(["nsenter", "-t", str(pid), "-m", "cat", str(path)], check=True,
                          capture_output=True, text=True).stdout


def test_racer_swapping_the_first_link_never_gives_its_text_to_the_others(racy_container, race_shim):
    """The racer puts its own link (another text) at the first link's name right after we made it: the
    links of the same text in other folders must still have our text, not be hard links of the racer's."""
    pid, rootfs, _ = racy_container
    script = 'ln -s /etc/racer "$ROOT/usr/lib/.r" && mv -T "$ROOT/usr/lib/.r" "$ROOT/usr/lib/libfoo.so.1"'
    ops = [("symlink", "libfoo.so.1.2", "/usr/lib/libfoo.so.1"),
           ("symlink", "libfoo.so.1.2", "/usr/lib32/libfoo.so.1"),
           ("symlink", "libfoo.so.1.2", "/usr/lib32/other/libfoo.so.1")]
    assert run_raced_batch(race_shim, rootfs, pid, ops, "symlinkat", "libfoo.so.1", "after", script) is None
    assert os.readlink(rootfs / "usr/lib/libfoo.so.1") == "/etc/racer"   # its own folder: the racer won there
    for other in ("usr/lib32/libfoo.so.1", "usr/lib32/other/libfoo.so.1"):
        assert os.readlink(rootfs / other) == "libfoo.so.1.2", other
        assert os.lstat(rootfs / other).st_ino != os.lstat(rootfs / "usr/lib/libfoo.so.1").st_ino


def test_racer_swapping_the_first_file_target_never_gets_it_shared(racy_container, race_shim):
    """Right after the first file target is made, the racer moves it away and puts its own file at its
    name: the later targets are links of the empty file we made (linked through our fd, not its name),
    never of the racer's file."""
    pid, rootfs, libs = racy_container
    script = ('mv "$ROOT/usr/lib/a.so" "$ROOT/usr/lib/a.moved" && printf racer > "$ROOT/usr/lib/.r" '
              '&& mv "$ROOT/usr/lib/.r" "$ROOT/usr/lib/a.so"')
    ops = [("bind", str(libs[n]), f"/usr/lib/{n}.so") for n in "abc"]
    assert run_raced_batch(race_shim, rootfs, pid, ops, "openat", "a.so", "after", script) is None
    ours, racers = os.stat(rootfs / "usr/lib/a.moved"), os.stat(rootfs / "usr/lib/a.so")
    for n in "bc":
        st = os.stat(rootfs / f"usr/lib/{n}.so")
        assert (st.st_ino, st.st_size) == (ours.st_ino, 0) and st.st_ino != racers.st_ino
        assert seen_inside(pid, rootfs / f"usr/lib/{n}.so") == f"\x7fELF lib{n}"
    assert ours.st_nlink == 3 and racers.st_nlink == 1
    assert (rootfs / "usr/lib/a.so").read_text() == "racer"
    # the mount follows the file we made, wherever it was moved (as before the shared targets)
    assert seen_inside(pid, rootfs / "usr/lib/a.moved") == "\x7fELF liba"


def test_racer_replacing_a_new_file_target_link_is_never_mounted_over(racy_container, race_shim):
    """The racer puts its own file at a target's name between our linkat and the check: the name is
    not our inode, so it is removed and the target made as a new empty file (which later targets then
    share), then mounted."""
    pid, rootfs, libs = racy_container
    script = 'printf racer > "$ROOT/usr/lib/.r" && mv -f "$ROOT/usr/lib/.r" "$ROOT/usr/lib/b.so"'
    ops = [("bind", str(libs[n]), f"/usr/lib/{n}.so") for n in "abc"]
    assert run_raced_batch(race_shim, rootfs, pid, ops, "linkat", "b.so", "after", script) is None
    a, b, c = (os.stat(rootfs / f"usr/lib/{n}.so") for n in "abc")
    # b's new file is the one later targets share
    assert a.st_ino != b.st_ino == c.st_ino and (a.st_nlink, b.st_nlink) == (1, 2)
    assert (b.st_size, b.st_mode & 0o7777, b.st_uid) == (0, 0o644, 0)
    for n in "abc":
        assert seen_inside(pid, rootfs / f"usr/lib/{n}.so") == f"\x7fELF lib{n}"


def test_racer_replacing_the_target_folder_by_a_link_to_the_host(racy_container, race_shim, tmp_path):
    """Between resolving a target's folder and linking into it, the racer moves the folder away and
    puts a symlink to a host dir at its name: the link lands in the folder we resolved (the fd), inside
    the root, and nothing appears on the host."""
    pid, rootfs, libs = racy_container
    host = tmp_path / "host"
    host.mkdir()
    script = f'mv "$ROOT/usr/lib/sub" "$ROOT/usr/lib/sub.moved" && ln -s {host} "$ROOT/usr/lib/sub"'
    ops = [("bind", str(libs["a"]), "/usr/lib/a.so"), ("bind", str(libs["b"]), "/usr/lib/sub/b.so")]
    assert run_raced_batch(race_shim, rootfs, pid, ops, "linkat", "b.so", "before", script) is None
    assert os.listdir(host) == []
    assert os.stat(rootfs / "usr/lib/sub.moved/b.so").st_ino == os.stat(rootfs / "usr/lib/a.so").st_ino
    assert seen_inside(pid, rootfs / "usr/lib/sub.moved/b.so") == "\x7fELF libb"


def test_racer_replacing_link_folders_by_links_to_the_host(racy_container, race_shim, tmp_path):
    """Between the first link and its hard link, the racer moves both folders away and puts symlinks to
    a host dir at their names: the hard link is made from and into the folders we resolved, inside the
    root, with our text; nothing appears on the host."""
    pid, rootfs, _ = racy_container
    host = tmp_path / "host"
    host.mkdir()
    script = "; ".join(f'mv "$ROOT/usr/{d}" "$ROOT/usr/{d}.moved" && ln -s {host} "$ROOT/usr/{d}"'
                       for d in ("lib", "lib32"))
    ops = [("symlink", "libfoo.so.1.2", "/usr/lib/libfoo.so.1"), ("symlink", "libfoo.so.1.2", "/usr/lib32/libfoo.so.1")]
    assert run_raced_batch(race_shim, rootfs, pid, ops, "linkat", "libfoo.so.1", "before", script) is None
    assert os.listdir(host) == []
    first, second = os.lstat(rootfs / "usr/lib.moved/libfoo.so.1"), os.lstat(rootfs / "usr/lib32.moved/libfoo.so.1")
    assert first.st_ino == second.st_ino and first.st_nlink == 2
    assert os.readlink(rootfs / "usr/lib32.moved/libfoo.so.1") == "libfoo.so.1.2"


@pytest.mark.parametrize("racer_puts", ["a hard link of a file", "its own link"])
def test_racer_replacing_the_first_link_before_it_is_linked_again(racy_container, race_shim, racer_puts):
    """Before the next link of the same text is made from the first one's name, the racer puts a hard
    link of a file of the root (or its own link) there: what linkat linked is not our link, so it is
    removed and the link made by symlinkat; the racer's file is never linked into another folder."""
    pid, rootfs, _ = racy_container
    (rootfs / "etc/secret").write_text("secret")
    if racer_puts == "its own link":
        script = 'ln -sfn /etc/racer "$ROOT/usr/lib/libfoo.so.1"'
    else:
        script = 'ln -f "$ROOT/etc/secret" "$ROOT/usr/lib/libfoo.so.1"'
    ops = [("symlink", "libfoo.so.1.2", "/usr/lib/libfoo.so.1"), ("symlink", "libfoo.so.1.2", "/usr/lib32/libfoo.so.1")]
    assert run_raced_batch(race_shim, rootfs, pid, ops, "linkat", "libfoo.so.1", "before", script) is None
    assert os.readlink(rootfs / "usr/lib32/libfoo.so.1") == "libfoo.so.1.2"
    assert os.lstat(rootfs / "usr/lib32/libfoo.so.1").st_nlink == 1
    assert os.stat(rootfs / "etc/secret").st_nlink == (2 if racer_puts != "its own link" else 1)


def test_a_fake_procfs_never_gets_a_file_linked_into_the_root(tmp_path):
    """The batch child finds the fd of the shared file target through /proc/self/fd of the namespace
    it joined. There, a tmpfs at /proc whose self/fd/N are links to a file next to the rootfs (same
    file system) must not be used (it is not procfs): every target is a new file of its own, and that
    file is never linked, not even for a moment (its ctime and link count stay)."""
    import subprocess

    from libcontainer_c.batch import RootfsBatch

    rootfs, victim = tmp_path / "rootfs", tmp_path / "victim"
    (rootfs / "usr/lib").mkdir(parents=True)
    victim.write_text("host file")
    libs = [tmp_path / f"lib{n}.so" for n in "abc"]
    for lib in libs:
        lib.write_bytes(b"\x7fELF " + lib.name.encode())
    before = os.stat(victim)
    fake = ("mount -n -t tmpfs fake /proc && mkdir -p /proc/real /proc/self/fd && mount -n -t proc proc /proc/real"
            " && ln -s /proc/real/self/mountinfo /proc/self/mountinfo"
            f" && for i in $(seq 0 255); do ln -s {victim} /proc/self/fd/$i; done")
    with process_in_mount_ns() as pid:
        subprocess.run(["nsenter", "-t", str(pid), "-m", "sh", "-c", fake], check=True)
        with RootfsBatch() as batch:
            for lib in libs:
                batch.bind(str(lib), f"/usr/lib/{lib.name}", LIBRARY)
            batch.run(rootfs=rootfs, pid=pid)
        for lib in libs:
            assert seen_inside(pid, rootfs / "usr/lib" / lib.name) == "\x7fELF " + lib.name
    after = os.stat(victim)
    assert (after.st_nlink, after.st_ctime_ns) == (1, before.st_ctime_ns)
    targets = [os.stat(rootfs / "usr/lib" / lib.name) for lib in libs]
    assert len({st.st_ino for st in targets}) == 3 and {st.st_nlink for st in targets} == {1}


def test_hard_linked_links_read_their_text_from_the_folder_they_are_reached_through(tmp_path):
    """Links of one text made as hard links of one inode resolve, through each name, as a link of its
    own made there would: relative to the folder of that name (.. included)."""
    from libcontainer_c.batch import RootfsBatch

    rootfs = tmp_path / "rootfs"
    texts = {"../lib/libfoo.so.2": ["/usr/lib32/libfoo.so", "/usr/lib32/gbm/libfoo.so", "/usr/lib64/x/libfoo.so"],
             "libbar.so.1": ["/usr/lib/libbar.so", "/usr/lib32/libbar.so", "/usr/lib32/gbm/libbar.so"]}
    for folder in ("usr/lib", "usr/lib32", "usr/lib32/gbm", "usr/lib32/lib", "usr/lib64/lib"):
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
        (rootfs / folder / "libfoo.so.2").write_text(f"{folder} foo")
        (rootfs / folder / "libbar.so.1").write_text(f"{folder} bar")
    with process_in_mount_ns() as pid:
        with RootfsBatch() as batch:
            for text, paths in texts.items():
                for path in paths:
                    batch.symlink(text, path)
            batch.run(rootfs=rootfs, pid=pid)
        for text, paths in texts.items():
            assert len({os.lstat(f"{rootfs}{p}").st_ino for p in paths}) == 1      # one inode per text
            for path in paths:
                os.symlink(text, f"{rootfs}{path}.own")   # a link of its own, made in that folder
                assert seen_inside(pid, f"{rootfs}{path}") == seen_inside(pid, f"{rootfs}{path}.own")
    assert (rootfs / "usr/lib32/libfoo.so").read_text() == "usr/lib foo"
    assert (rootfs / "usr/lib32/gbm/libfoo.so").read_text() == "usr/lib32/lib foo"
    assert (rootfs / "usr/lib64/x/libfoo.so").read_text() == "usr/lib64/lib foo"
    assert (rootfs / "usr/lib32/gbm/libbar.so").read_text() == "usr/lib32/gbm bar"
