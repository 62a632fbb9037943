"""The two pieces of the ldconfig path that are C since nvidia-cdi-hook is (src/static_exe.c,
src/ld_so_conf.c), through the Python wrappers the prestart hook uses: which host binaries may run in
a rootfs (crafted ELF headers included), and the ld.so.conf.d drop-in that never writes through what
the image put there."""
from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess

import pytest

from libcontainer_c.errors import ContainerFsError
from libcontainer_c.ldconfig import LD_SO_CONF_PATH, LdconfigError, open_static_executable, write_ld_so_conf
from libcontainer_c.rootfs import Rootfs

PT_LOAD, PT_INTERP = 1, 3


def elf(types, *, bits=64, big=False, phentsize=None, phoff=None, phnum=None, cut=0) -> bytes:
    """An ELF header plus a program header table with entries of the given p_types."""
    order = ">" if big else "<"
    ehsize = 64 if bits == 64 else 52
    phentsize = phentsize if phentsize is not None else (56 if bits == 64 else 32)
    phoff = phoff if phoff is not None else 64   # after the header as the reader pads it
    phnum = phnum if phnum is not None else len(types)
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 2 if big else 1, 1]) + bytes(9)
    if bits == 64:
        head = ident + struct.pack(order + "HHIQQQIHHHHHH", 2, 62, 1, 0, phoff, 0, 0, ehsize, phentsize, phnum, 0, 0, 0)
    else:
        head = ident + struct.pack(order + "HHIIIIIHHHHHH", 2, 3, 1, 0, phoff, 0, 0, ehsize, phentsize, phnum, 0, 0, 0)
    head = head.ljust(64, b"\0")   # an ELF32 header is 52 bytes; the reader looks at 64
    table = b"".join(struct.pack(order + "I", t).ljust(phentsize, b"\0") for t in types)
    data = (head.ljust(phoff, b"\0") if phoff < 4096 else head) + table   # a bogus offset: the table is elsewhere
    return data[:len(data) - cut] if cut else data


def write(tmp_path, name, data: bytes, mode=0o755):
    path = tmp_path / name
    path.write_bytes(data)
    path.chmod(mode)
    return str(path)


def refused(path) -> LdconfigError:
    with pytest.raises(LdconfigError) as info:
        open_static_executable(path)
    return info.value


@pytest.mark.parametrize("bits, big", [(64, False), (64, True), (32, False), (32, True)])
def test_elf_headers_of_every_class_and_byte_order(tmp_path, bits, big):
    os.close(open_static_executable(write(tmp_path, "static", elf([PT_LOAD, PT_LOAD], bits=bits, big=big))))
    err = refused(write(tmp_path, "dynamic", elf([PT_LOAD, PT_INTERP], bits=bits, big=big)))
    assert err.errno == errno.ENOEXEC and "dynamically linked" in str(err) and err.filename.endswith("/dynamic")


@pytest.mark.parametrize("data", [
    elf([PT_LOAD], phnum=0),                      # no program headers
    elf([PT_LOAD], phentsize=2),                  # entries too small to hold p_type
    elf([PT_LOAD, PT_LOAD], cut=1),               # the table runs past the end of the file
    elf([PT_LOAD], phoff=1 << 63),                # an offset no file has
    elf([PT_LOAD], phoff=(1 << 64) - 8),
    elf([PT_LOAD], phentsize=0xffff, phnum=0xffff),   # claims a 4 GiB table
    b"\x7fELF\x02\x01\x01",                       # shorter than a header
    b"\x7fELF\x03\x01" + bytes(58),               # no such class
    b"MZ" + bytes(62),
    b"",
])
def test_what_is_not_an_elf_executable(tmp_path, data):
    err = refused(write(tmp_path, "bad", data))
    assert err.errno == errno.ENOEXEC and "not an ELF executable" in str(err)


def test_scripts_give_way_to_their_real_binary(tmp_path):
    err = refused(write(tmp_path, "ldconfig", b"#!/bin/sh\nexec ldconfig.real\n"))
    assert "script" in str(err) and err.filename == str(tmp_path / "ldconfig")
    write(tmp_path, "ldconfig.real", b"#!")        # a wrapper of a wrapper: followed on
    write(tmp_path, "ldconfig.real.real", elf([PT_INTERP]))
    err = refused(str(tmp_path / "ldconfig"))
    assert "dynamically linked" in str(err) and err.filename == str(tmp_path / "ldconfig.real.real")
    write(tmp_path, "ldconfig.real.real", elf([PT_LOAD]))
    fd = open_static_executable(str(tmp_path / "ldconfig"))
    try:
        assert os.path.samefile(f"/proc/self/fd/{fd}", tmp_path / "ldconfig.real.real")
    finally:
        os.close(fd)


def test_missing_and_special_files(tmp_path):
    err = refused(str(tmp_path / "missing"))
    assert (err.errno, err.operation, err.filename) == (errno.ENOENT, "open ldconfig", str(tmp_path / "missing"))
    assert "not an ELF" in str(refused(str(tmp_path)))   # a directory
    if os.path.exists("/bin/true") and "INTERP" in subprocess.run(["readelf", "-l", "/bin/true"],
                                                                  capture_output=True, text=True).stdout:
        assert "dynamically linked" in str(refused("/bin/true"))


def test_the_hosts_ldconfig_is_accepted():
    if not os.path.exists("/sbin/ldconfig"):
        pytest.skip("no /sbin/ldconfig")
    os.close(open_static_executable("/sbin/ldconfig"))


# -- the ld.so.conf.d drop-in ----------------------------------------------------------------------

@pytest.fixture
def root(tmp_path):
    (tmp_path / "root/etc").mkdir(parents=True)
    with Rootfs(tmp_path / "root") as r:
        yield r


def drop_in(tmp_path):
    return tmp_path / "root" / LD_SO_CONF_PATH.lstrip("/")


def test_it_lists_the_folders_readable_by_all_whatever_the_umask(root, tmp_path):
    old = os.umask(0o077)
    try:
        write_ld_so_conf(root, ["/usr/lib/x86_64-linux-gnu", "/opt/v/lib"])
    finally:
        os.umask(old)
    conf = drop_in(tmp_path)
    assert conf.read_text() == ("# driver library folders, written by nvidia-cdi-hook\n"
                                "/usr/lib/x86_64-linux-gnu\n/opt/v/lib\n")
    assert conf.stat().st_mode & 0o777 == 0o644
    assert os.listdir(conf.parent) == [conf.name]   # no temp file left
    write_ld_so_conf(root, ["/l"])                   # written again: replaced
    assert conf.read_text().splitlines()[1:] == ["/l"]


def test_a_drop_in_that_already_says_it_is_left_as_it_is(root, tmp_path):
    """A restarted container reuses its rootfs: the same folders leave the file alone (same inode)."""
    write_ld_so_conf(root, ["/usr/lib/x86_64-linux-gnu", "/opt/v/lib"])
    conf = drop_in(tmp_path)
    before = os.stat(conf)
    write_ld_so_conf(root, ["/usr/lib/x86_64-linux-gnu", "/opt/v/lib"])
    assert (os.stat(conf).st_ino, os.stat(conf).st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    write_ld_so_conf(root, ["/opt/v/lib", "/usr/lib/x86_64-linux-gnu"])   # another order: written again
    assert os.stat(conf).st_ino != before.st_ino
    assert conf.read_text().splitlines()[1:] == ["/opt/v/lib", "/usr/lib/x86_64-linux-gnu"]


@pytest.mark.parametrize("how", ["mode", "owner", "hardlink", "longer", "shorter"])
def test_the_same_text_in_another_kind_of_file_is_written_again(root, tmp_path, how):
    """Only a file exactly as writing it would leave it is kept: another mode or owner, a second
    link (say to a host file), a text that only starts or ends the same is replaced."""
    write_ld_so_conf(root, ["/l"])
    conf = drop_in(tmp_path)
    text = conf.read_text()
    other = tmp_path / "other"
    if how == "mode":
        conf.chmod(0o600)
    elif how == "owner":
        os.chown(conf, 1000, 1000)
    elif how == "hardlink":
        os.link(conf, other)
    else:
        conf.write_text(text + "/m\n" if how == "longer" else text[:-1])
    before = os.stat(conf)
    write_ld_so_conf(root, ["/l"])
    after = os.stat(conf)
    assert after.st_ino != before.st_ino
    assert conf.read_text() == text
    assert (after.st_mode & 0o7777, after.st_uid, after.st_nlink) == (0o644, os.geteuid(), 1)


@pytest.mark.parametrize("how", ["symlink", "hardlink", "fifo"])
def test_what_the_image_put_there_is_replaced_never_written_through(root, tmp_path, how):
    victim = tmp_path / "victim"
    victim.write_text("host file\n")
    conf = drop_in(tmp_path)
    conf.parent.mkdir()
    {"symlink": lambda: os.symlink(victim, conf), "hardlink": lambda: os.link(victim, conf),
     "fifo": lambda: os.mkfifo(conf)}[how]()
    write_ld_so_conf(root, ["/l"])
    assert victim.read_text() == "host file\n"
    assert not conf.is_symlink() and conf.read_text().splitlines()[1:] == ["/l"]


def test_a_directory_there_and_bad_folders_are_errors(root, tmp_path):
    conf = drop_in(tmp_path)
    conf.mkdir(parents=True)
    with pytest.raises(ContainerFsError) as info:
        write_ld_so_conf(root, ["/l"])
    assert info.value.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST)
    assert os.listdir(conf.parent) == [conf.name]   # the temp file is gone again
    shutil.rmtree(conf)
    for folders in (["/a\ninclude /evil/*.conf"], ["relative"]):
        with pytest.raises(ContainerFsError) as info:
            write_ld_so_conf(root, folders)
        assert info.value.errno == errno.EINVAL
    assert not conf.exists()


def test_the_directory_is_resolved_inside_the_root(root, tmp_path):
    (tmp_path / "host-etc").mkdir()
    shutil.rmtree(tmp_path / "root/etc")
    os.symlink(str(tmp_path / "host-etc"), tmp_path / "root/etc")   # /etc -> a host path
    with pytest.raises(ContainerFsError):
        write_ld_so_conf(root, ["/l"])   # the link leads nowhere inside the root
    assert os.listdir(tmp_path / "host-etc") == []
    os.unlink(tmp_path / "root/etc")
    os.symlink("../../../../../../../..", tmp_path / "root/etc")   # climbing out: clamped at the root
    write_ld_so_conf(root, ["/l"])
    assert (tmp_path / "root/ld.so.conf.d/00-nvidia-cdi-hook.conf").exists()
