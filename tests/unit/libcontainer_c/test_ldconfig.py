"""The sandboxed ldconfig runner on real rootfs trees, with the host's real ldconfig.

The rootfs: busybox-static plus real ELF libraries (the host's libz and one built here with gcc).
Hostile variants point /etc, the cache and procfs magic links at a host temp dir, which must stay
untouched. A static probe program, run through the same runner, shows what the sandbox leaves.
"""
import errno
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from libcontainer_c.ldconfig import (LdconfigError, Limits, host_ldconfig_path, run_ldconfig)
from tests.support.mountns import process_in_mount_ns, tree_listing

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="chroot and namespaces need root"),
    pytest.mark.skipif(not os.path.exists("/sbin/ldconfig"), reason="no host ldconfig"),
]

LIBDIR = "usr/lib/x86_64-linux-gnu"
HOST_LIBZ = "/lib/x86_64-linux-gnu/libz.so.1.2.13"


@pytest.fixture(scope="module")
def built_library(tmp_path_factory):
    """A real shared library with SONAME libgctprobe.so.1, built with gcc."""
    out = tmp_path_factory.mktemp("lib")
    src = out / "probe.c"
    src.write_text("int gct_probe(void) { return 42; }\n")
    lib = out / "libgctprobe.so.1.0.0"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libgctprobe.so.1", "-o", lib, src], check=True)
    return lib


def make_rootfs(path, built_library):
    (path / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", path / "bin/busybox")
    (path / LIBDIR).mkdir(parents=True)
    (path / "etc").mkdir()
    (path / "proc").mkdir()
    shutil.copy(built_library, path / LIBDIR / built_library.name)
    if os.path.exists(HOST_LIBZ):
        shutil.copy(HOST_LIBZ, path / LIBDIR / "libz.so.1.2.13")
    return path


@pytest.fixture
def rootfs(tmp_path, built_library):
    return make_rootfs(tmp_path / "rootfs", built_library)


@pytest.fixture
def hostdir(tmp_path):
    d = tmp_path / "hostdir"
    d.mkdir()
    (d / "ld.so.cache").write_bytes(b"host cache, must not change")
    return d


def test_ldconfig_builds_the_cache_inside_the_rootfs(rootfs):
    result = run_ldconfig(rootfs, ["/" + LIBDIR])
    assert result.returncode == 0
    cache = (rootfs / "etc/ld.so.cache").read_bytes()
    assert b"glibc-ld.so.cache1.1" in cache
    assert b"libgctprobe.so.1" in cache
    if os.path.exists(HOST_LIBZ):
        assert b"libz.so.1" in cache
    # ldconfig also made the SONAME link, inside the rootfs
    assert os.readlink(rootfs / LIBDIR / "libgctprobe.so.1") == "libgctprobe.so.1.0.0"


def test_etc_symlink_to_host_dir_writes_nothing_outside(rootfs, hostdir):
    shutil.rmtree(rootfs / "etc")
    os.symlink(str(hostdir), rootfs / "etc")          # /etc -> a host dir, absolute
    before = tree_listing(hostdir)
    with pytest.raises(LdconfigError) as info:
        run_ldconfig(rootfs, ["/" + LIBDIR])
    # ldconfig builds its cache on the scratch tmpfs; /etc, clamped inside the root, is missing there
    assert (info.value.operation, info.value.errno, info.value.filename) == \
        ("write the cache", errno.ENOENT, "/etc/ld.so.cache")
    assert tree_listing(hostdir) == before


def test_cache_symlink_pointing_out_is_replaced_not_followed(rootfs, hostdir):
    os.symlink(str(hostdir / "ld.so.cache"), rootfs / "etc/ld.so.cache")
    os.symlink("../../../../../../../.." + str(hostdir), rootfs / "etc/ld.so.conf.d")
    before = tree_listing(hostdir)
    run_ldconfig(rootfs, ["/" + LIBDIR])
    assert tree_listing(hostdir) == before
    assert (hostdir / "ld.so.cache").read_bytes() == b"host cache, must not change"
    assert b"libgctprobe.so.1" in (rootfs / "etc/ld.so.cache").read_bytes()


@pytest.fixture
def container(rootfs):
    """A process in its own mount namespace with a real procfs mounted at <rootfs>/proc."""
    with process_in_mount_ns(proc_at=rootfs / "proc") as pid:
        yield pid


def test_live_container_magic_link_through_procfs_stays_inside(rootfs, hostdir, container):
    # /etc -> /proc/1/root/<hostdir>: through the container's procfs this would be the host's dir
    shutil.rmtree(rootfs / "etc")
    os.symlink(f"/proc/1/root{hostdir}", rootfs / "etc")
    before = tree_listing(hostdir)
    with pytest.raises(LdconfigError):
        run_ldconfig(rootfs, ["/" + LIBDIR], pid=container)
    assert tree_listing(hostdir) == before
    # and with an ordinary /etc the same live container gets its cache
    os.unlink(rootfs / "etc")
    (rootfs / "etc").mkdir()
    assert run_ldconfig(rootfs, ["/" + LIBDIR], pid=container).returncode == 0
    assert b"libgctprobe.so.1" in (rootfs / "etc/ld.so.cache").read_bytes()
    # the procfs inside the container was hidden only in the runner's private copy
    out = subprocess.run(["nsenter", "-t", str(container), "-m", "ls", str(rootfs / "proc/self")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "status" in out.stdout


PROBE_C = r"""
#include <linux/capability.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>
extern char **environ;
int main(int argc, char **argv) {
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];
    struct rlimit cpu, nofile;
    int envc = 0, fds = 0, cap, bounding = 0, node_errno = 0;
    for (char **e = environ; *e; e++) envc++;
    syscall(SYS_capget, &h, d);
    for (cap = 0; cap < 64; cap++) if (prctl(PR_CAPBSET_READ, cap) == 1) bounding++;
    for (int fd = 3; fd < 1024; fd++) if (fcntl(fd, F_GETFD) >= 0) fds++;
    getrlimit(RLIMIT_CPU, &cpu); getrlimit(RLIMIT_NOFILE, &nofile);
    if (open("/usr/lib/libnode.so.1", O_RDONLY) < 0) node_errno = errno;
    printf("{\"argv0\": \"%s\", \"argc\": %d, \"env\": %d, \"eff\": %u, \"prm\": %u, \"bounding\": %d,"
           " \"nnp\": %d, \"cpu\": %lu, \"nofile\": %lu, \"extra_fds\": %d, \"marker\": %d, \"uid\": %d,"
           " \"node_errno\": %d}\n",
           argv[0], argc, envc, d[0].effective | d[1].effective, d[0].permitted | d[1].permitted,
           bounding, prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), (unsigned long)cpu.rlim_cur,
           (unsigned long)nofile.rlim_cur, fds, access("/marker-inside-rootfs", F_OK) == 0, getuid(),
           node_errno);
    return 3;
}
"""


def test_sandbox_leaves_nothing_privileged(rootfs, tmp_path, monkeypatch):
    src = tmp_path / "probe.c"
    src.write_text(PROBE_C)
    probe = tmp_path / "probe"
    subprocess.run(["gcc", "-static", "-O1", "-o", probe, src], check=True)
    (rootfs / "marker-inside-rootfs").write_text("")
    # a device node the image ships among its libraries (here /dev/null's numbers) opens nothing
    os.mknod(rootfs / "usr/lib/libnode.so.1", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    monkeypatch.setenv("LD_PRELOAD", "/evil.so")
    leak = os.open("/", os.O_RDONLY)  # an fd of ours that must not reach the program
    try:
        result = run_ldconfig(rootfs, ["/lib"], ldconfig=str(probe), check=False,
                              limits=Limits(cpu_seconds=7, open_files=99))
    finally:
        os.close(leak)
    seen = json.loads(result.output)
    assert result.returncode == 3
    # argc 4: "ldconfig -C /proc/ld.so.cache /lib" (the cache goes to the scratch tmpfs)
    assert seen == {"argv0": "ldconfig", "argc": 4, "env": 0, "eff": 0, "prm": 0, "bounding": 0,
                    "nnp": 1, "cpu": 7, "nofile": 99, "extra_fds": 0, "marker": 1, "uid": 0,
                    "node_errno": errno.EACCES}


def test_failures_are_clear(rootfs, tmp_path):
    with pytest.raises(LdconfigError) as info:
        run_ldconfig(rootfs, ldconfig=str(tmp_path / "missing"))
    assert info.value.operation == "open ldconfig" and info.value.errno == 2
    with pytest.raises(LdconfigError) as info:
        run_ldconfig(tmp_path / "no-rootfs")
    assert info.value.operation == "open root" and info.value.errno == 2
    # a FIFO as ld.so.conf blocks ldconfig forever: the wall-clock limit kills it
    os.mkfifo(rootfs / "etc/ld.so.conf")
    with pytest.raises(LdconfigError) as info:
        run_ldconfig(rootfs, timeout=0.5)
    assert "timed out" in info.value.operation


def test_the_output_in_a_failure_message_is_printable(rootfs, tmp_path):
    """ldconfig's last line may name files of the image: the message shows '?' for what repr would
    escape (ESC, C1 controls such as U+009B, bidi overrides), as nvidia-cdi-hook does."""
    source = tmp_path / "fake_ldconfig.c"
    source.write_text('#include <stdio.h>\nint main(void) { fputs("first\\n'
                      r'/usr/lib/x\x1b[2J\xc2\x9b" "31m\xe2\x80\xae" "evil\xc3\xa9\n"'
                      ', stdout); return 1; }\n')
    fake = tmp_path / "fake_ldconfig"
    subprocess.run(["gcc", "-static", "-o", fake, source], check=True)
    with pytest.raises(LdconfigError) as info:
        run_ldconfig(rootfs, ldconfig=str(fake))
    assert str(info.value).endswith(" (exit status 1: /usr/lib/x?[2J?31m?evil\u00e9)")


def test_host_ldconfig_path_refuses_container_paths():
    assert host_ldconfig_path("@/sbin/ldconfig") == "/sbin/ldconfig"
    with pytest.raises(ValueError, match="container path"):
        host_ldconfig_path("/sbin/ldconfig")
    with pytest.raises(ValueError, match="absolute"):
        host_ldconfig_path("@ldconfig")


def test_only_static_binaries_run(rootfs, tmp_path):
    script = tmp_path / "ldconfig"
    script.write_text("#!/bin/sh\nexec /sbin/ldconfig.real \"$@\"\n")
    script.chmod(0o755)
    with pytest.raises(LdconfigError) as info:
        run_ldconfig(rootfs, ldconfig=str(script))
    assert info.value.errno == errno.ENOEXEC and "script" in str(info.value)
    # the shell the script names would be the image's: never started
    with pytest.raises(LdconfigError) as info:
        run_ldconfig(rootfs, ldconfig="/bin/true")  # dynamically linked on these hosts
    assert info.value.errno == errno.ENOEXEC and "dynamically linked" in str(info.value)
    text = tmp_path / "notes.txt"
    text.write_text("not a program\n")
    with pytest.raises(LdconfigError) as info:
        run_ldconfig(rootfs, ldconfig=str(text))
    assert "not an ELF" in str(info.value)
    # Ubuntu's layout: a wrapper script next to the static ldconfig.real, which is what runs
    shutil.copy("/sbin/ldconfig", tmp_path / "ldconfig.real")
    assert run_ldconfig(rootfs, ["/" + LIBDIR], ldconfig=str(script)).returncode == 0
    assert b"libgctprobe.so.1" in (rootfs / "etc/ld.so.cache").read_bytes()


@pytest.mark.parametrize("host_version, compat_first", [
    ("550.54.15", True), ("998", True), ("999.1", False), ("1000", False),
    ("550abc", True),        # C's strtol reads 550: so does Python
    ("5\u00b2", True),       # a superscript two is no digit of the version (int() raised ValueError)
    ("99\u0669", True),      # nor is an Arabic-Indic nine (int() read 999 where C reads 99)
    ("9" * 40, False),
])
def test_the_compat_folder_is_decided_as_nvidia_cdi_hook_decides(tmp_path, host_version, compat_first):
    """hook.cdi_hook.update_ldcache (live injection) and nvidia-cdi-hook read the driver version's
    major the same way: its leading ASCII digits."""
    from libcontainer_c.ldconfig import cuda_compat_folder
    from libcontainer_c.rootfs import Rootfs

    compat = tmp_path / "usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (compat / "libcuda.so.999.1.2").write_text("")
    warnings = []
    with Rootfs(str(tmp_path)) as root:
        folder = cuda_compat_folder(root, host_version, warnings.append)
    assert folder == ("/usr/local/cuda/compat" if compat_first else None) and warnings == []


def test_python_sees_only_the_public_api_of_the_sandbox():
    """The scratch mount over /proc is gct_update_ld_cache's own (gct_sandbox_run, src/internal.h), and
    gct_new_tmpfs and gct_replace_file are C-only helpers: none is in the cffi cdef. A public
    scratch_fd field was 0 in every struct ffi.new made: fd 0 for a caller of gct_sandbox_exec."""
    from libcontainer_c._native import ffi, lib

    fields = [name for name, _ in ffi.typeof("struct gct_sandbox").fields]
    assert fields == ["exe_fd", "mntns_fd", "root_path", "argv", "limits", "timeout_ms"]
    for name in ("gct_sandbox_run", "gct_new_tmpfs", "gct_replace_file"):
        assert not hasattr(lib, name), name
    assert hasattr(lib, "gct_sandbox_exec") and hasattr(lib, "gct_update_ld_cache")


def test_the_new_cache_is_put_in_place_without_an_fsync(rootfs, tmp_path):
    """On a fresh rootfs the cache always differs from the image's, and an fsync of it cost every new
    GPU container ~4 ms: it is renamed into place unsynced (a cache a crash left short is rewritten
    by the next start). Only ldconfig itself, on the sandbox's scratch tmpfs, still fsyncs."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace"
    code = (f"import sys; sys.path[:0] = {sys.path!r}; from libcontainer_c.ldconfig import run_ldconfig; "
            f"assert run_ldconfig({str(rootfs)!r}, ['/{LIBDIR}']).returncode == 0")
    subprocess.run(["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=execve,execveat,fsync,fdatasync",
                    sys.executable, "-I", "-S", "-c", code], check=True)
    lines = trace.read_text().splitlines()
    ldconfig_pids = {line.split()[0] for line in lines if "exec" in line and "ldconfig" in line and "= 0" in line}
    ours = [line for line in lines if ("fsync(" in line or "fdatasync(" in line) and line.split()[0] not in ldconfig_pids]
    assert ldconfig_pids and ours == []
    assert b"libgctprobe.so.1" in (rootfs / "etc/ld.so.cache").read_bytes()
