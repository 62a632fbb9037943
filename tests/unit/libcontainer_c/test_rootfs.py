"""libcontainer_c.rootfs: resolution, placeholders, symlinks and fd-based mounts on real files."""
import errno
import os
import stat

import pytest

from libcontainer_c import rootfs
from libcontainer_c.errors import ContainerFsError
from libcontainer_c.rootfs import (DEVICE_NODE, LIBRARY, READONLY_FILES, MountOptions, MountStack,
                                   Rootfs)
from tests.support.mountns import mounts_under, run_in_private_mount_ns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount tests need root")


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "rootfs"
    path.mkdir()
    with Rootfs(path) as r:
        yield r


def test_resolve_follows_image_symlinks_inside_the_root(root):
    base = root.path
    os.makedirs(base / "usr/lib")
    os.symlink("usr/lib", base / "lib")
    os.symlink("/usr/lib", base / "abs")
    (base / "usr/lib/x").write_text("x")
    for path in ("/lib/x", "lib/x", "/abs/x", "/../../abs/x"):
        st = root.stat(path)
        assert st.st_ino == os.stat(base / "usr/lib/x").st_ino


def test_stat_without_following_the_last_link(root):
    os.symlink("nowhere", root.path / "dangling")
    assert stat.S_ISLNK(root.stat("/dangling", follow_symlinks=False).st_mode)
    assert not root.exists("/dangling")


def test_mkdirs_creates_every_component(root):
    root.mkdirs("/a/b/c", 0o750)
    assert (root.path / "a/b/c").is_dir()
    root.mkdirs("/a/b/c")  # existing: fine


def test_mkdirs_through_a_file_fails_with_errno_and_path(root):
    (root.path / "file").write_text("")
    with pytest.raises(ContainerFsError) as info:
        root.mkdirs("/file/sub")
    assert info.value.errno == errno.ENOTDIR
    assert info.value.filename == "/file/sub"
    assert info.value.operation == "mkdir -p"
    assert "mkdir -p" in str(info.value) and "/file/sub" in str(info.value)


def test_placeholder_file_is_created_then_reused(root):
    fd = root.make_file("/dev/nvidia0")
    os.close(fd)
    st = os.lstat(root.path / "dev/nvidia0")
    assert stat.S_ISREG(st.st_mode)
    fd = root.make_file("/dev/nvidia0")
    assert os.fstat(fd).st_ino == st.st_ino
    os.close(fd)


@pytest.mark.parametrize("kind, expected", [
    ("symlink", errno.ELOOP), ("dir", errno.EISDIR), ("fifo", errno.EEXIST)])
def test_placeholder_file_refuses_what_is_not_a_regular_file(root, kind, expected):
    target = root.path / "target"
    if kind == "symlink":
        os.symlink("/etc/passwd", target)
    elif kind == "dir":
        target.mkdir()
    else:
        os.mkfifo(target)
    with pytest.raises(ContainerFsError) as info:
        root.make_file("/target")
    assert info.value.errno == expected
    assert info.value.filename == "/target"


def test_placeholder_dir_refuses_symlink_and_file(root):
    os.symlink("/", root.path / "link")
    (root.path / "file").write_text("")
    with pytest.raises(ContainerFsError) as info:
        root.make_dir("/link")
    assert info.value.errno == errno.ELOOP
    with pytest.raises(ContainerFsError) as info:
        root.make_dir("/file")
    assert info.value.errno == errno.ENOTDIR
    os.close(root.make_dir("/new/dir"))
    assert (root.path / "new/dir").is_dir()


@pytest.mark.parametrize("path", ["/", "/a/..", "/a/.", ""])
def test_placeholder_needs_a_name(root, path):
    with pytest.raises(ContainerFsError) as info:
        root.make_file(path)
    assert info.value.errno == errno.EINVAL


def test_symlink_create_and_replace(root):
    root.symlink("libcuda.so.1", "/usr/lib/libcuda.so")
    assert os.readlink(root.path / "usr/lib/libcuda.so") == "libcuda.so.1"
    root.symlink("libcuda.so.2", "/usr/lib/libcuda.so")
    assert os.readlink(root.path / "usr/lib/libcuda.so") == "libcuda.so.2"
    assert os.listdir(root.path / "usr/lib") == ["libcuda.so"]  # no temporary name left


def test_a_link_that_is_already_right_is_left_as_it_is(root):
    """A restarted container reuses its rootfs: the link it has is not remade (same inode), whatever
    its text leads to (it is compared, never followed)."""
    os.makedirs(root.path / "usr/lib/libcuda.so.1")   # a directory behind the link: not followed
    root.symlink("libcuda.so.1", "/usr/lib/libcuda.so")
    before = os.lstat(root.path / "usr/lib/libcuda.so")
    root.symlink("libcuda.so.1", "/usr/lib/libcuda.so")
    after = os.lstat(root.path / "usr/lib/libcuda.so")
    assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)
    assert os.readlink(root.path / "usr/lib/libcuda.so") == "libcuda.so.1"


@pytest.mark.parametrize("existing", ["libcuda.so.1/", "libcuda.so.10", "libcuda.so.", "/usr/lib/libcuda.so.1",
                                      "./libcuda.so.1"])
def test_a_link_with_another_text_is_replaced(root, existing):
    """Byte for byte: a link leading to the same file by another text is replaced too."""
    os.makedirs(root.path / "usr/lib")
    os.symlink(existing, root.path / "usr/lib/libcuda.so")
    before = os.lstat(root.path / "usr/lib/libcuda.so")
    root.symlink("libcuda.so.1", "/usr/lib/libcuda.so")
    assert os.readlink(root.path / "usr/lib/libcuda.so") == "libcuda.so.1"
    assert os.lstat(root.path / "usr/lib/libcuda.so").st_ino != before.st_ino
    assert os.listdir(root.path / "usr/lib") == ["libcuda.so"]


def test_symlink_refuses_to_replace_dir_or_file(root):
    (root.path / "dir").mkdir()
    (root.path / "file").write_text("keep")
    with pytest.raises(ContainerFsError) as info:
        root.symlink("x", "/dir")
    assert info.value.errno == errno.EISDIR
    with pytest.raises(ContainerFsError) as info:
        root.symlink("x", "/file")
    assert info.value.errno == errno.EEXIST
    assert (root.path / "file").read_text() == "keep"
    assert sorted(os.listdir(root.path)) == ["dir", "file"]


def test_missing_root_raises():
    with pytest.raises(ContainerFsError) as info:
        Rootfs("/nonexistent/rootfs")
    assert info.value.errno == errno.ENOENT
    assert info.value.operation == "open root"


def test_options_validation(tmp_path):
    lib = tmp_path / "libfoo.so.1"
    lib.write_bytes(b"\x7fELF" + b"\0" * 60)
    with pytest.raises(ValueError, match="noexec"):
        rootfs.clone_source(str(lib), READONLY_FILES)
    with pytest.raises(ValueError, match="nodev"):
        rootfs.clone_source("/dev/null", MountOptions(("ro", "nodev")))
    with pytest.raises(ValueError, match="unknown mount flag"):
        MountOptions(("rw",))


def _bind_file_and_dir(base):
    host = base / "host"
    lib = host / "libfoo.so.1"
    data = host / "firmware"
    with Rootfs(base / "rootfs") as root:
        m1 = root.bind(str(lib), "/usr/lib/libfoo.so.1", LIBRARY)
        m2 = root.bind(str(data), "/lib/firmware/nvidia", READONLY_FILES)
        m3 = root.bind("/dev/null", "/dev/nvidia-fake", DEVICE_NODE)
        inside = (base / "rootfs/usr/lib/libfoo.so.1").read_bytes()
        listing = os.listdir(base / "rootfs/lib/firmware/nvidia")
        table = mounts_under(base / "rootfs")
        try:
            (base / "rootfs/lib/firmware/nvidia/new").write_text("x")
            writable = True
        except OSError as err:
            writable = err.errno
        with open(base / "rootfs/dev/nvidia-fake", "w") as f:  # a device node without nodev opens
            f.write("ok")
        for m in (m3, m2, m1):
            m.unmount()
        after = mounts_under(base / "rootfs")
    return inside, listing, table, writable, after


def test_bind_file_dir_and_device_with_flags(tmp_path):
    host = tmp_path / "host"
    (host / "firmware").mkdir(parents=True)
    (host / "firmware/gsp.bin").write_bytes(b"fw")
    (host / "libfoo.so.1").write_bytes(b"\x7fELF library")
    (tmp_path / "rootfs").mkdir()
    inside, listing, table, writable, after = run_in_private_mount_ns(_bind_file_and_dir, tmp_path)
    assert inside == b"\x7fELF library"
    assert listing == ["gsp.bin"]
    assert writable == errno.EROFS
    opts = {point[len(str(tmp_path / "rootfs")):]: flags for point, flags, _ in table}
    assert opts["/usr/lib/libfoo.so.1"] >= {"ro", "nosuid", "nodev"}
    assert "noexec" not in opts["/usr/lib/libfoo.so.1"]
    assert opts["/lib/firmware/nvidia"] >= {"ro", "nosuid", "nodev", "noexec"}
    assert opts["/dev/nvidia-fake"] >= {"ro", "nosuid", "noexec"}
    assert "nodev" not in opts["/dev/nvidia-fake"]
    assert after == []
    # placeholders stay (empty) on the rootfs; the host files are untouched
    assert (tmp_path / "rootfs/usr/lib/libfoo.so.1").read_bytes() == b""
    assert os.listdir(host / "firmware") == ["gsp.bin"]


def _propagation_of(base):
    with Rootfs(base / "rootfs") as root:
        m = root.bind(str(base / "host"), "/mnt", READONLY_FILES)
        with open("/proc/self/mountinfo") as f:
            line = next(ln for ln in f if ln.split()[4] == str(base / "rootfs/mnt"))
        m.unmount()
    return line


def test_bind_is_private(tmp_path):
    (tmp_path / "host").mkdir()
    (tmp_path / "rootfs").mkdir()
    line = run_in_private_mount_ns(_propagation_of, tmp_path)
    optional = line.split(" - ")[0].split()[6:]
    assert not any(f.startswith(("shared:", "master:")) for f in optional), line


def _rollback(base):
    with Rootfs(base / "rootfs") as root:
        stack = MountStack()
        with pytest.raises(ContainerFsError):
            with stack:
                stack.push(root.bind(str(base / "host/lib.so"), "/lib/lib.so", LIBRARY))
                stack.push(root.mount_tmpfs("/proc/driver/nvidia"))
                (base / "rootfs/dir").write_text("")
                root.bind(str(base / "host/lib.so"), "/dir/x", LIBRARY)  # ENOTDIR
    return mounts_under(base / "rootfs")


def test_mount_stack_rolls_back_on_error(tmp_path):
    (tmp_path / "host").mkdir()
    (tmp_path / "host/lib.so").write_bytes(b"\x7fELF")
    (tmp_path / "rootfs").mkdir()
    assert run_in_private_mount_ns(_rollback, tmp_path) == []


def _tmpfs(base):
    with Rootfs(base / "rootfs") as root:
        m = root.mount_tmpfs("/proc/driver/nvidia", "mode=0711,size=1m", readonly=True)
        table = mounts_under(base / "rootfs")
        mode = os.stat(base / "rootfs/proc/driver/nvidia").st_mode & 0o777
        m.unmount()
    return table, mode


def test_tmpfs_mount(tmp_path):
    (tmp_path / "rootfs").mkdir()
    table, mode = run_in_private_mount_ns(_tmpfs, tmp_path)
    assert len(table) == 1
    point, flags, fstype = table[0]
    assert point.endswith("/proc/driver/nvidia") and fstype == "tmpfs"
    assert flags >= {"ro", "nosuid", "nodev", "noexec"}
    assert mode == 0o711


def _bind_devices(base):
    with Rootfs(base / "rootfs") as root:
        m = root.bind_device("/dev/null", "/dev/nvidia0", 1, 3)
        table = mounts_under(base / "rootfs")
        errors = []
        for source, numbers in (("/dev/null", (195, 0)), (str(base / "plain"), (1, 3))):
            try:
                root.bind_device(source, "/dev/other", *numbers)
            except ContainerFsError as err:
                errors.append((err.errno, err.operation, err.filename))
        m.unmount()
    return table, errors


def test_bind_device_checks_the_node(tmp_path):
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "plain").write_text("")
    table, errors = run_in_private_mount_ns(_bind_devices, tmp_path)
    assert [(p[len(str(tmp_path / "rootfs")):], "nodev" in f) for p, f, _ in table] == [("/dev/nvidia0", False)]
    assert errors == [
        (errno.ENODEV, "check device node (want char 195:0, found char 1:3)", "/dev/null"),
        (errno.ENODEV, "check device node (want char 1:3, found not a char device)", str(tmp_path / "plain")),
    ]
    assert not (tmp_path / "rootfs/dev/other").exists()  # checked before any placeholder is made


def _ipc_and_binary(base):
    import socket
    import subprocess
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(base / "host.sock"))
    server.listen(1)
    with Rootfs(base / "rootfs") as root:
        stack = MountStack()
        with stack:
            stack.push(root.bind(str(base / "host.sock"), "/var/run/nvidia-persistenced/socket",
                                 rootfs.IPC_SOCKET))
            stack.push(root.bind("/bin/busybox", "/usr/bin/nvidia-smi", rootfs.BINARY))
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(base / "rootfs/var/run/nvidia-persistenced/socket"))
            conn, _ = server.accept()
            client.sendall(b"ping")
            got = conn.recv(4)
            ran = subprocess.run(["busybox", "echo", "ran"], executable=str(base / "rootfs/usr/bin/nvidia-smi"),
                                 capture_output=True, text=True).stdout
            stack.rollback()
    return got, ran


@pytest.mark.skipif(not os.path.exists("/bin/busybox"), reason="needs busybox-static")
def test_ipc_socket_connects_and_binary_executes_through_the_mount(tmp_path):
    (tmp_path / "rootfs").mkdir()
    assert run_in_private_mount_ns(_ipc_and_binary, tmp_path) == (b"ping", "ran\n")


def _bind_onto_shared(base):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    def mount(src, dst, flags):
        assert libc.mount(str(src).encode() if src else None, str(dst).encode(), None, flags, None) == 0

    MS_BIND, MS_SHARED = 0x1000, 1 << 20
    mount(base / "rootfs", base / "rootfs", MS_BIND)          # the rootfs mount itself, shared
    mount(None, base / "rootfs", MS_SHARED)
    mount(base / "hostvol", base / "hostvol", MS_BIND)
    mount(None, base / "hostvol", MS_SHARED)                  # a host dir mounted shared...
    mount(base / "hostvol", base / "rootfs/vol", MS_BIND)     # ...and its peer inside the rootfs
    errors = {}
    with Rootfs(base / "rootfs") as r:
        for target in ("/vol/lib.so", "/lib.so"):
            try:
                r.bind(str(base / "lib.so"), target, LIBRARY)
                errors[target] = None
            except ContainerFsError as err:
                errors[target] = (err.errno, err.operation)
    with open("/proc/self/mountinfo") as f:
        seen = sorted(line.split()[4] for line in f if "lib.so" in line)
    return errors, seen


def test_bind_onto_a_shared_volume_is_refused(tmp_path):
    (tmp_path / "rootfs/vol").mkdir(parents=True)
    (tmp_path / "hostvol").mkdir()
    (tmp_path / "lib.so").write_bytes(b"\x7fELF")
    errors, seen = run_in_private_mount_ns(_bind_onto_shared, tmp_path)
    assert errors["/vol/lib.so"] == (errno.EXDEV, "bind mount refused: the target is on a shared mount "
                                                  "(it would propagate out of the container)")
    # the rootfs mount itself may be shared (docker does that when a volume is rshared)
    assert errors["/lib.so"] is None
    assert seen == [str(tmp_path / "rootfs/lib.so")]  # nothing in the volume or its host peer


def _unmount_by_path(base):
    results = []
    with Rootfs(base / "rootfs") as root:
        root.bind(str(base / "lib.so"), "/usr/lib/lib.so", LIBRARY).close()  # forget the Mount
        root.mount_tmpfs("/run/x").close()
        os.symlink("/usr/lib/lib.so", base / "rootfs/link")
        for path in ("/link", "/usr/lib", "/usr/lib/lib.so", "/run/x"):
            try:
                root.unmount(path)
                results.append((path, "ok"))
            except ContainerFsError as err:
                results.append((path, err.errno))
    return results, mounts_under(base / "rootfs")


def test_unmount_by_container_path(tmp_path):
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "lib.so").write_bytes(b"\x7fELF")
    results, left = run_in_private_mount_ns(_unmount_by_path, tmp_path)
    assert results == [("/link", errno.EINVAL), ("/usr/lib", errno.EINVAL),
                       ("/usr/lib/lib.so", "ok"), ("/run/x", "ok")]
    assert left == []
