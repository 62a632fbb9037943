"""libcontainer_c.batch against a real process in its own mount namespace (a stand-in container).

The "container" is `unshare -m --propagation private sleep`, so whatever the batch mounts lives in
that namespace only and goes away with the process. We look inside with nsenter.
"""
import errno
import os
import subprocess

import pytest

from libcontainer_c.batch import BatchError, RootfsBatch
from libcontainer_c.rootfs import DEVICE_NODE, LIBRARY, READONLY_FILES
from tests.support.mountns import in_user_namespace, mountinfo_lines, process_in_mount_ns, run_in_private_mount_ns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespace tests need root")


@pytest.fixture
def container(tmp_path):
    """(pid, rootfs) of a process sleeping in a private mount namespace; killed afterwards."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr/lib").mkdir(parents=True)
    (rootfs / "proc").mkdir()
    with process_in_mount_ns() as pid:
        yield pid, rootfs


def inside(pid, *argv) -> str:
    return subprocess.run(["nsenter", "-t", str(pid), "-m", *argv], check=True,
                          capture_output=True, text=True).stdout


def container_mounts(pid, rootfs) -> dict:
    found = {}
    for line in inside(pid, "cat", "/proc/self/mountinfo").splitlines():
        fields = line.split()
        point = fields[4]
        if point.startswith(str(rootfs) + "/"):
            found[point[len(str(rootfs)):]] = (set(fields[5].split(",")), fields[fields.index("-") + 1])
    return found


@pytest.fixture
def host_files(tmp_path):
    host = tmp_path / "host"
    (host / "firmware").mkdir(parents=True)
    (host / "firmware/gsp.bin").write_bytes(b"firmware")
    (host / "libfoo.so.1.2").write_bytes(b"\x7fELF libfoo")
    return host


def test_batch_injects_into_live_namespace(container, host_files):
    pid, rootfs = container
    host_table = mountinfo_lines()
    with RootfsBatch() as batch:
        batch.mkdirs("/usr/local/share/nvidia")
        batch.bind(str(host_files / "libfoo.so.1.2"), "/usr/lib/libfoo.so.1.2", LIBRARY)
        batch.symlink("libfoo.so.1.2", "/usr/lib/libfoo.so.1")
        batch.bind(str(host_files / "firmware"), "/lib/firmware/nvidia/550", READONLY_FILES)
        batch.bind_device("/dev/null", "/dev/nvidia0", 1, 3)
        batch.bind("/dev/zero", "/dev/nvidia1", DEVICE_NODE)
        batch.tmpfs("/proc/driver/nvidia")
        batch.write_file("/proc/driver/nvidia/version", "NVRM version: 550.54\n")
        batch.remount("/proc/driver/nvidia", readonly=True)
        batch.run(rootfs=rootfs, pid=pid)

    mounts = container_mounts(pid, rootfs)
    assert set(mounts) == {"/usr/lib/libfoo.so.1.2", "/lib/firmware/nvidia/550", "/dev/nvidia0",
                           "/dev/nvidia1", "/proc/driver/nvidia"}
    assert "noexec" not in mounts["/usr/lib/libfoo.so.1.2"][0]
    assert mounts["/usr/lib/libfoo.so.1.2"][0] >= {"ro", "nosuid", "nodev"}
    assert mounts["/dev/nvidia0"][0] >= {"ro", "nosuid", "noexec"}
    assert "nodev" not in mounts["/dev/nvidia0"][0]
    assert inside(pid, "sh", "-c", f"head -c 3 {rootfs}/dev/nvidia1 | od -An -tx1").split() == ["00"] * 3
    assert mounts["/proc/driver/nvidia"] == ({"ro", "nosuid", "nodev", "noexec", "relatime"}, "tmpfs")
    assert inside(pid, "cat", f"{rootfs}/usr/lib/libfoo.so.1") == "\x7fELF libfoo"
    assert inside(pid, "cat", f"{rootfs}/lib/firmware/nvidia/550/gsp.bin") == "firmware"
    assert inside(pid, "cat", f"{rootfs}/proc/driver/nvidia/version") == "NVRM version: 550.54\n"
    # the host sees the placeholders (same directory) but none of the mounts
    assert mountinfo_lines() == host_table
    assert (rootfs / "usr/lib/libfoo.so.1.2").read_bytes() == b""
    assert os.listdir(rootfs / "lib/firmware/nvidia/550") == []
    assert os.readlink(rootfs / "usr/lib/libfoo.so.1") == "libfoo.so.1.2"
    assert (rootfs / "usr/local/share/nvidia").is_dir()


def test_file_mount_targets_share_one_inode(container, host_files):
    """New mount targets of files are hard links of the batch's first one (an inode costs far more than
    a link on a fresh rootfs); each still shows its own mount. A target on another file system gets
    its own file, the image's own file is used as it is, and a link there is still refused."""
    pid, rootfs = container
    (rootfs / "mnt").mkdir()
    inside(pid, "mount", "-t", "tmpfs", "tmpfs", f"{rootfs}/mnt")
    (rootfs / "usr/lib/own.so").write_bytes(b"")
    libs = {}
    for name in ("a", "b", "c", "d", "e", "own"):
        libs[name] = host_files / f"lib{name}.so"
        libs[name].write_bytes(f"\x7fELF lib{name}".encode())
    targets = {"a": "/usr/lib/a.so", "b": "/usr/lib/b.so", "c": "/usr/lib/sub/c.so", "d": "/mnt/d.so",
               "e": "/usr/lib/e.so", "own": "/usr/lib/own.so"}
    own_inode = (rootfs / "usr/lib/own.so").stat().st_ino
    with RootfsBatch() as batch:
        for name, target in targets.items():
            batch.bind(str(libs[name]), target, LIBRARY)
        batch.run(rootfs=rootfs, pid=pid)
    for name, target in targets.items():
        assert inside(pid, "cat", f"{rootfs}{target}") == f"\x7fELF lib{name}"
    # the host's view has the targets without the mounts
    st = {name: os.stat(f"{rootfs}{targets[name]}") for name in ("a", "b", "c", "e", "own")}
    assert st["a"].st_ino == st["b"].st_ino == st["c"].st_ino and st["a"].st_nlink == 3
    assert st["a"].st_size == 0 and st["a"].st_mode & 0o7777 == 0o644 and st["a"].st_uid == 0
    assert st["e"].st_ino != st["a"].st_ino       # after the tmpfs target: a file of its own
    assert st["own"].st_ino == own_inode and st["own"].st_nlink == 1

    os.symlink("/etc/hostname", rootfs / "usr/lib/evil.so")
    with RootfsBatch() as batch:
        batch.bind(str(libs["a"]), "/usr/lib/f.so", LIBRARY)
        batch.bind(str(libs["b"]), "/usr/lib/evil.so", LIBRARY)
        with pytest.raises(BatchError) as info:
            batch.run(rootfs=rootfs, pid=pid)
    assert (info.value.errno, info.value.filename) == (errno.ELOOP, "/usr/lib/evil.so")
    assert os.readlink(rootfs / "usr/lib/evil.so") == "/etc/hostname"


def _batch_where_proc_fd_is_not_procfs(rootfs, lib):
    """In a private mount namespace: /proc replaced by a tmpfs that holds only a copy of this
    namespace's mount table (what the batch's propagation check reads), so /proc/self/fd is no
    procfs and the shared file target cannot be linked through it."""
    import shutil
    from tests.support.mountns import _mount

    with open("/proc/self/mountinfo") as f:
        table = f.read()
    _mount("tmpfs", "/proc", "tmpfs", 0, None)
    os.makedirs("/proc/self/fd")
    with open("/proc/self/mountinfo", "w") as f:
        f.write(table)
    batch = RootfsBatch()
    batch.bind(lib, "/usr/lib/a.so", LIBRARY)
    batch.bind(lib, "/usr/lib/new/b.so", LIBRARY)   # its folder made first (mkdirat EEXIST on the way)
    batch.run(rootfs=rootfs)
    batch.close()
    shutil.rmtree("/proc/self")


def test_without_procfs_file_targets_are_files_of_their_own(tmp_path):
    (tmp_path / "rootfs/usr/lib").mkdir(parents=True)
    (tmp_path / "lib.so").write_bytes(b"\x7fELF")
    run_in_private_mount_ns(_batch_where_proc_fd_is_not_procfs, str(tmp_path / "rootfs"), str(tmp_path / "lib.so"))
    # the host's view: the two empty targets, without the mounts
    a, b = (os.stat(tmp_path / "rootfs/usr/lib" / p) for p in ("a.so", "new/b.so"))
    assert a.st_ino != b.st_ino and a.st_size == b.st_size == 0


def test_links_with_the_same_text_share_one_inode(container):
    """A link whose text an earlier link of the batch has is a hard link of that one (read relative to
    its own folder all the same); the image's links and entries are never shared or linked to."""
    pid, rootfs = container
    (rootfs / "usr/lib32").mkdir()
    (rootfs / "mnt").mkdir()
    inside(pid, "mount", "-t", "tmpfs", "tmpfs", f"{rootfs}/mnt")
    for folder in ("usr/lib", "usr/lib32"):
        (rootfs / folder / "libfoo.so.1.2").write_text(folder)
    os.symlink("libfoo.so.1.2", rootfs / "usr/lib/image.so")          # the image's, same text
    (rootfs / "usr/lib32/libfoo.so").write_text("the image's own file")
    with RootfsBatch() as batch:
        batch.symlink("libfoo.so.1.2", "/usr/lib/libfoo.so.1")
        batch.symlink("libfoo.so.1.2", "/usr/lib32/libfoo.so.1")
        batch.symlink("libfoo.so.1.2", "/usr/lib32/gbm/libfoo.so.1")   # in a new folder
        batch.symlink("libfoo.so.1.2", "/usr/lib/image.so")            # already right: left alone
        batch.symlink("libfoo.so.1", "/usr/lib/libfoo.so")
        batch.symlink("libfoo.so.1.2", "/mnt/libfoo.so.1")             # another file system
        batch.run(rootfs=rootfs, pid=pid)
    st = {p: os.lstat(rootfs / p) for p in ("usr/lib/libfoo.so.1", "usr/lib32/libfoo.so.1",
                                            "usr/lib32/gbm/libfoo.so.1", "usr/lib/image.so", "usr/lib/libfoo.so")}
    assert st["usr/lib/libfoo.so.1"].st_ino == st["usr/lib32/libfoo.so.1"].st_ino == \
        st["usr/lib32/gbm/libfoo.so.1"].st_ino
    assert st["usr/lib/libfoo.so.1"].st_nlink == 3 and st["usr/lib/image.so"].st_nlink == 1
    assert st["usr/lib/libfoo.so"].st_ino != st["usr/lib/libfoo.so.1"].st_ino
    assert (rootfs / "usr/lib/libfoo.so").read_text() == "usr/lib"
    assert (rootfs / "usr/lib32/libfoo.so.1").read_text() == "usr/lib32"
    assert inside(pid, "readlink", f"{rootfs}/mnt/libfoo.so.1").strip() == "libfoo.so.1.2"

    with RootfsBatch() as batch:
        batch.symlink("libfoo.so.1.2", "/usr/lib/libfoo.so.9")
        batch.symlink("libfoo.so.1.2", "/usr/lib32/libfoo.so")           # the image's file is kept
        with pytest.raises(BatchError) as info:
            batch.run(rootfs=rootfs, pid=pid)
    assert (info.value.errno, info.value.filename) == (errno.EEXIST, "/usr/lib32/libfoo.so")
    assert (rootfs / "usr/lib32/libfoo.so").read_text() == "the image's own file"


def test_failure_rolls_back_and_names_the_operation(container, host_files):
    pid, rootfs = container
    (rootfs / "etc").write_text("a file where a directory is needed")
    with RootfsBatch() as batch:
        batch.bind(str(host_files / "libfoo.so.1.2"), "/usr/lib/libfoo.so.1.2", LIBRARY)
        batch.tmpfs("/proc/driver/nvidia")
        batch.make_file("/etc/nvidia/conf")
        batch.bind(str(host_files / "firmware"), "/lib/firmware/nvidia/550", READONLY_FILES)
        with pytest.raises(BatchError) as info:
            batch.run(rootfs=rootfs, pid=pid)
    err = info.value
    assert (err.errno, err.index, err.operation, err.filename) == (
        errno.ENOTDIR, 2, "create placeholder file", "/etc/nvidia/conf")
    assert "create placeholder file" in str(err) and "/etc/nvidia/conf" in str(err)
    assert container_mounts(pid, rootfs) == {}  # the first two mounts were undone
    assert not (rootfs / "lib").exists()        # the fourth operation never ran


def test_hostile_link_in_live_container(container, host_files, tmp_path):
    pid, rootfs = container
    victim = tmp_path / "victim"
    victim.mkdir()
    os.rmdir(rootfs / "usr/lib")
    os.symlink(str(victim), rootfs / "usr/lib")  # /usr/lib -> a host dir (absolute)
    with RootfsBatch() as batch:
        batch.bind(str(host_files / "libfoo.so.1.2"), "/usr/lib/libfoo.so.1.2", LIBRARY)
        with pytest.raises(BatchError) as info:
            batch.run(rootfs=rootfs, pid=pid)
    assert info.value.errno == errno.ENOENT  # clamped to <rootfs><victim>, which does not exist
    assert os.listdir(victim) == []
    assert container_mounts(pid, rootfs) == {}


def test_setup_errors_are_reported(tmp_path):
    with pytest.raises(BatchError) as info:
        RootfsBatch().mkdirs("/x").run(rootfs=tmp_path, pid=2 ** 22 + 1)
    assert info.value.operation == "open mount namespace" and info.value.errno == errno.ENOENT
    with pytest.raises(BatchError) as info:
        RootfsBatch().mkdirs("/x").run(rootfs=tmp_path / "missing")
    assert (info.value.operation, info.value.errno, info.value.index) == ("open root", errno.ENOENT, -1)
    assert info.value.filename == str(tmp_path / "missing")


def _run_without_setns(rootfs, lib):
    batch = RootfsBatch()
    batch.bind(lib, "/lib.so", LIBRARY)
    batch.run(rootfs=rootfs)
    batch.close()
    with open(os.path.join(rootfs, "lib.so"), "rb") as f:
        return f.read()


def test_batch_in_own_namespace_without_pid(tmp_path):
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "lib.so").write_bytes(b"\x7fELF own ns")
    assert run_in_private_mount_ns(_run_without_setns, str(tmp_path / "rootfs"),
                                   str(tmp_path / "lib.so")) == b"\x7fELF own ns"


def test_batch_modes_ignore_the_callers_umask(tmp_path):
    (tmp_path / "rootfs").mkdir()
    old = os.umask(0o077)
    try:
        RootfsBatch().mkdirs("/usr/local/nvidia", 0o755).write_file("/etc/nvidia.conf", "x", 0o644) \
            .run(rootfs=tmp_path / "rootfs")
    finally:
        os.umask(old)
    assert (tmp_path / "rootfs/usr/local/nvidia").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "rootfs/usr/local").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "rootfs/etc/nvidia.conf").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "rootfs/etc/nvidia.conf").read_text() == "x"


def test_if_exists_skips_what_has_no_directory(container):
    pid, rootfs = container
    # the stand-in for a procfs without a driver: /proc exists, /proc/driver/nvidia does not
    def driver_proc_batch():
        return (RootfsBatch()
                .tmpfs("/proc/driver/nvidia", if_exists=True)
                .write_file("/proc/driver/nvidia/version", "NVRM\n", if_exists=True)
                .remount("/proc/driver/nvidia", if_exists=True))
    driver_proc_batch().run(rootfs=rootfs, pid=pid)
    assert container_mounts(pid, rootfs) == {}
    assert not (rootfs / "proc/driver").exists()

    (rootfs / "proc/driver/nvidia").mkdir(parents=True)
    driver_proc_batch().run(rootfs=rootfs, pid=pid)
    assert container_mounts(pid, rootfs) == {"/proc/driver/nvidia": (
        {"ro", "nosuid", "nodev", "noexec", "relatime"}, "tmpfs")}
    assert inside(pid, "cat", f"{rootfs}/proc/driver/nvidia/version") == "NVRM\n"


def test_unmount_undoes_an_earlier_batch(container, host_files):
    pid, rootfs = container
    with RootfsBatch() as batch:
        batch.bind(str(host_files / "libfoo.so.1.2"), "/usr/lib/libfoo.so.1.2", LIBRARY)
        batch.tmpfs("/proc/driver/nvidia")
        batch.run(rootfs=rootfs, pid=pid)
    assert set(container_mounts(pid, rootfs)) == {"/usr/lib/libfoo.so.1.2", "/proc/driver/nvidia"}
    os.symlink("/usr/lib/libfoo.so.1.2", rootfs / "link")
    # a link is not followed (nothing unmounted through it), a plain directory is a no-op
    RootfsBatch().unmount("/link").unmount("/usr").run(rootfs=rootfs, pid=pid)
    assert set(container_mounts(pid, rootfs)) == {"/usr/lib/libfoo.so.1.2", "/proc/driver/nvidia"}
    (RootfsBatch().unmount("/proc/driver/nvidia").unmount("/usr/lib/libfoo.so.1.2")
     .unmount("/missing", if_exists=True).run(rootfs=rootfs, pid=pid))
    assert container_mounts(pid, rootfs) == {}


def test_a_batch_runs_once(tmp_path):
    (tmp_path / "rootfs").mkdir()
    batch = RootfsBatch().mkdirs("/a")
    batch.run(rootfs=tmp_path / "rootfs")
    with pytest.raises(RuntimeError, match="only once"):
        batch.run(rootfs=tmp_path / "rootfs")


@pytest.fixture
def userns_container():
    """(pid, rootfs) of a process in a user namespace of its own (its ids 0-65535 the host's
    100000-165535, the host's root not mapped) and a mount namespace that namespace owns, where the
    rootfs' /dev is a tmpfs it mounted, as a runtime mounts it in such a container. The rootfs lies in
    a directory the namespace's root can traverse (pytest's temp dirs are 0700)."""
    import shutil
    import tempfile
    from pathlib import Path

    work = Path(tempfile.mkdtemp(prefix="gct-batch-userns-"))
    work.chmod(0o755)
    rootfs = work / "rootfs"
    (rootfs / "dev").mkdir(parents=True)
    proc = in_user_namespace(f"mount -n -t tmpfs tmpfs '{rootfs}/dev' && echo ready && exec sleep 120", 100000, 100000)
    try:
        assert proc.stdout.readline() == "ready\n", "the stand-in container did not start"
        yield proc.pid, rootfs
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def test_in_a_user_namespace_files_are_made_for_its_root(userns_container):
    """The container's /dev tmpfs belongs to its user namespace, which cannot map the host's root: files
    made there as the host's root fail with EOVERFLOW (a device node's mount target did). The batch makes
    them as the host ids of the namespace's root, who owns them."""
    pid, rootfs = userns_container
    with RootfsBatch() as batch:
        batch.bind_device("/dev/null", "/dev/nvidiactl", 1, 3)
        batch.mkdirs("/dev/nvidia-caps")
        batch.run(rootfs=rootfs, pid=pid)
    assert set(container_mounts(pid, rootfs)) == {"/dev", "/dev/nvidiactl"}
    owners = inside(pid, "stat", "-c", "%n %u:%g", str(rootfs / "dev/nvidia-caps"), str(rootfs / "dev")).split("\n")
    assert owners[:2] == [f"{rootfs}/dev/nvidia-caps 100000:100000", f"{rootfs}/dev 100000:100000"]


def test_container_root_ids():
    from libcontainer_c.batch import container_root_ids

    assert container_root_ids(os.getpid()) == (-1, -1)    # our own user namespace
    proc = in_user_namespace("echo ready; read x", 100000, 200000)
    try:
        assert proc.stdout.readline() == "ready\n"
        assert container_root_ids(proc.pid) == (100000, 200000)
    finally:
        proc.kill()
        proc.wait()
