"""nvidia-cdi-hook (C, cdi_hook/): the rootfs from the state, and real runs of the
installed program on a busybox + glibc rootfs with the host's ldconfig. The Python readers the
prestart hook keeps (hook.cdi_hook) are held to the same cases. The argument chains are in
args_cases.json (test_args_table.py), the JSON reader's edge cases in test_json_reader.py."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hook.cdi_hook import HookError, load_container_config, read_state, state_bundle
from tests.e2e.rootfs import make_rootfs

# the installed program; GCT_TEST_CDI_HOOK: another build of it (say one with the sanitizers)
HOOK = Path(os.environ.get("GCT_TEST_CDI_HOOK") or Path(sys.executable).parent / "nvidia-cdi-hook")
LIB = "/usr/lib/x86_64-linux-gnu"

needs_hook = pytest.mark.skipif(not HOOK.exists(), reason="needs the installed launcher (make venv)")
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not HOOK.exists() or not os.path.exists("/sbin/ldconfig"),
                                reason="needs root, the installed launcher (make venv) and /sbin/ldconfig")


def run_hook(args, state, cwd="/", env=None, timeout=60):
    """The installed program as a createContainer hook runs: the state (a dict, or the text) on stdin."""
    stdin = state if isinstance(state, str) else json.dumps(state)
    return subprocess.run([str(HOOK), *args], input=stdin, capture_output=True, text=True, cwd=cwd,
                          env=env if env is not None else {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=timeout)


def error_line(result) -> str:
    """The one error line of a failed run, without the program's prefix."""
    assert result.returncode == 1, result
    line, = result.stderr.strip().splitlines()
    assert line.startswith("nvidia-cdi-hook: error: "), line
    return line[len("nvidia-cdi-hook: error: "):]


def python_rootfs(state: dict) -> str:
    """The prestart hook's reading of the same state."""
    return load_container_config(state_bundle(state))[1]


# -- the rootfs -----------------------------------------------------------------------------------

def write_bundle(bundle: Path, root_path: str) -> None:
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "root": {"path": root_path}}))


LINK = ["create-symlinks", "--link", "target::/made-by-the-hook"]


@needs_hook
def test_rootfs_comes_from_the_bundle_not_the_cwd(tmp_path, monkeypatch):
    write_bundle(tmp_path / "bundle", "rootfs")
    (tmp_path / "bundle/rootfs").mkdir()
    for key in ("bundle", "bundlePath"):
        state = {key: str(tmp_path / "bundle")}
        assert run_hook(LINK, state, cwd="/").returncode == 0
        assert os.readlink(tmp_path / "bundle/rootfs/made-by-the-hook") == "target"
        os.unlink(tmp_path / "bundle/rootfs/made-by-the-hook")
        monkeypatch.chdir("/")
        assert python_rootfs(state) == str(tmp_path / "bundle/rootfs")
    # an absolute root.path, normalised as os.path.normpath does
    write_bundle(tmp_path / "b2", str(tmp_path) + "//elsewhere/./x/../")
    (tmp_path / "elsewhere").mkdir()
    assert run_hook(LINK, {"bundle": str(tmp_path / "b2")}).returncode == 0
    assert os.readlink(tmp_path / "elsewhere/made-by-the-hook") == "target"
    assert python_rootfs({"bundle": str(tmp_path / "b2")}) == str(tmp_path / "elsewhere")
    write_bundle(tmp_path / "b3", "/somewhere/else/")
    assert error_line(run_hook(LINK, {"bundle": str(tmp_path / "b3")})) == \
        "cannot open the container's root: No such file or directory (/somewhere/else)"
    assert python_rootfs({"bundle": str(tmp_path / "b3")}) == "/somewhere/else"


@needs_hook
@pytest.mark.parametrize("state, message", [
    ({}, "container state has no absolute bundle path (stdin)"),
    ({"bundle": "relative"}, "container state has no absolute bundle path (stdin)"),
    ({"bundle": "/nonexistent-bundle"},
     "cannot read the container's config: No such file or directory (/nonexistent-bundle/config.json)"),
])
def test_bad_states(state, message):
    assert error_line(run_hook(LINK, state)) == message
    with pytest.raises(HookError, match=message.split(" (")[0]):
        python_rootfs(state)


@needs_hook
def test_a_config_without_root_path(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert error_line(run_hook(LINK, {"bundle": str(tmp_path)})) == \
        f"container config has no root.path ({tmp_path}/config.json)"
    with pytest.raises(HookError, match="container config has no root.path"):
        python_rootfs({"bundle": str(tmp_path)})


@needs_hook
def test_container_spec_names_the_config(tmp_path):
    write_bundle(tmp_path / "bundle", "rootfs")
    (tmp_path / "other").mkdir()
    (tmp_path / "spec.json").write_text(json.dumps({"root": {"path": str(tmp_path / "other")}}))
    result = run_hook([*LINK, "--container-spec", str(tmp_path / "spec.json")], {"bundle": str(tmp_path / "bundle")})
    assert result.returncode == 0, result.stderr
    assert os.readlink(tmp_path / "other/made-by-the-hook") == "target"


@needs_hook
def test_deeply_nested_json_is_an_error_not_a_crash(tmp_path):
    """Nesting deeper than the reader's limit (Go's, 10000) is one error line; the Python reader
    (RecursionError from json.loads) says the same."""
    deep = "[" * 200_000 + "]" * 200_000
    (tmp_path / "config.json").write_text('{"root": {"path": "rootfs"}, "x": ' + deep + "}")
    assert error_line(run_hook(LINK, {"bundle": str(tmp_path)})).startswith("invalid container config: Nesting too deep")
    assert error_line(run_hook(LINK, deep)).startswith("invalid container state: Nesting too deep")
    with pytest.raises(HookError, match="invalid container config"):
        python_rootfs({"bundle": str(tmp_path)})
    with pytest.raises(HookError, match="invalid container state"):
        read_state(io.BytesIO(deep.encode()))


@needs_hook
def test_a_config_that_is_a_fifo_is_an_error_without_blocking(tmp_path):
    import signal

    os.mkfifo(tmp_path / "config.json")
    assert error_line(run_hook(LINK, {"bundle": str(tmp_path)}, timeout=10)) == \
        f"container config is not a regular file ({tmp_path}/config.json)"

    def timeout(signum, frame):
        raise TimeoutError("load_container_config blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(5)
    try:
        with pytest.raises(HookError, match="not a regular file"):
            python_rootfs({"bundle": str(tmp_path)})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@needs_hook
def test_a_config_that_is_a_symlink_is_not_followed(tmp_path):
    write_bundle(tmp_path / "real", "rootfs")
    (tmp_path / "bundle").mkdir()
    os.symlink(tmp_path / "real/config.json", tmp_path / "bundle/config.json")
    assert error_line(run_hook(LINK, {"bundle": str(tmp_path / "bundle")})) == \
        f"cannot read the container's config: Too many levels of symbolic links ({tmp_path}/bundle/config.json)"


@needs_hook
def test_huge_inputs_are_refused_at_their_limit(tmp_path):
    state = json.dumps({"bundle": str(tmp_path), "pad": ""})
    big = state[:-2] + "x" * ((1 << 20) - len(state) + 1) + '"}'
    assert error_line(run_hook(LINK, big)) == "container state is too large (stdin)"
    with pytest.raises(HookError, match="container state is too large"):
        read_state(io.BytesIO(big.encode()))
    config = json.dumps({"root": {"path": "rootfs"}, "pad": ""})
    (tmp_path / "config.json").write_text(config[:-2] + "x" * ((16 << 20) - len(config) + 1) + '"}')
    assert error_line(run_hook(LINK, {"bundle": str(tmp_path)})) == \
        f"container config is too large ({tmp_path}/config.json)"
    with pytest.raises(HookError, match="container config is too large"):
        python_rootfs({"bundle": str(tmp_path)})
    # exactly at the limits: read
    (tmp_path / "config.json").write_text(config[:-2] + "x" * ((16 << 20) - len(config)) + '"}')
    (tmp_path / "rootfs").mkdir()
    assert run_hook(LINK, state[:-2] + "x" * ((1 << 20) - len(state)) + '"}').returncode == 0
    assert os.readlink(tmp_path / "rootfs/made-by-the-hook") == "target"


@needs_hook
def test_far_larger_inputs_are_refused_too(tmp_path):
    """Well past the limits (the reader's buffer once grew beyond max + 1, then shrank below what it
    had read: a read into memory past the buffer, EFAULT at best)."""
    state = json.dumps({"bundle": str(tmp_path), "pad": "x" * (5 << 20)})
    assert error_line(run_hook(LINK, state)) == "container state is too large (stdin)"
    config = json.dumps({"root": {"path": "rootfs"}, "pad": "x" * (40 << 20)})
    (tmp_path / "config.json").write_text(config)
    assert error_line(run_hook(LINK, {"bundle": str(tmp_path)})) == \
        f"container config is too large ({tmp_path}/config.json)"


# -- real runs of the installed program -----------------------------------------------------------


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    out = tmp_path_factory.mktemp("lib")
    (out / "l.c").write_text("int gct_cdi_probe(void) { return 7; }\n")
    lib = out / "libgctcdi.so.550.54.15"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libgctcdi.so.1", "-o", lib, out / "l.c"], check=True)
    return lib


@pytest.fixture
def bundle(tmp_path, library):
    """A bundle whose rootfs has the library in /opt/vendor/lib, a folder no ld.so.conf lists."""
    write_bundle(tmp_path / "bundle", "rootfs")
    root = make_rootfs(tmp_path / "bundle" / "rootfs", glibc=True)
    (root / "opt/vendor/lib").mkdir(parents=True)
    shutil.copy(library, root / "opt/vendor/lib")
    return tmp_path / "bundle"


def cache_listing(root: Path) -> str:
    return subprocess.run(["chroot", str(root), "/sbin/ldconfig", "-p"], capture_output=True, text=True,
                          check=True).stdout


@needs_root
def test_links_and_ld_cache_in_one_run(bundle):
    root = bundle / "rootfs"
    args = ["create-symlinks", "--link", "libgctcdi.so.550.54.15::/opt/vendor/lib/libgctcdi.so.1",
            "--link", "libgctcdi.so.1::/opt/vendor/lib/libgctcdi.so",
            "update-ldcache", "--folder", "/opt/vendor/lib"]
    assert "libgctcdi" not in cache_listing(root)
    # cwd is the rootfs, as under runc: the hook must not care
    result = run_hook(args, {"ociVersion": "1.0.2", "id": "c", "status": "created", "pid": 0,   # crun's
                             "bundle": str(bundle)}, cwd=str(root))                     # createContainer state
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert os.readlink(root / "opt/vendor/lib/libgctcdi.so.1") == "libgctcdi.so.550.54.15"
    assert os.readlink(root / "opt/vendor/lib/libgctcdi.so") == "libgctcdi.so.1"
    assert "libgctcdi.so.1 (libc6,x86-64) => /opt/vendor/lib/libgctcdi.so.1" in cache_listing(root)
    conf = root / "etc/ld.so.conf.d/00-nvidia-cdi-hook.conf"
    assert conf.read_text().splitlines()[1:] == ["/opt/vendor/lib"] and (conf.stat().st_mode & 0o777) == 0o644
    assert [p.name for p in conf.parent.iterdir()] == [conf.name]   # no temp file left


@needs_root
def test_a_later_ldconfig_in_the_container_keeps_the_folder(bundle):
    root = bundle / "rootfs"
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n/lib/x86_64-linux-gnu\n")
    assert run_hook(["update-ldcache", "--folder", "/opt/vendor/lib"], {"bundle": str(bundle)}).returncode == 0
    subprocess.run(["chroot", str(root), "/sbin/ldconfig"], check=True)   # e.g. a package install
    assert "=> /opt/vendor/lib/libgctcdi.so.1" in cache_listing(root)


@needs_root
def test_without_the_folder_the_library_stays_out_of_the_cache(bundle):
    # the other half of the test above: it is --folder that brings the folder in
    result = run_hook(["update-ldcache"], {"bundle": str(bundle)})
    assert result.returncode == 0, result.stderr
    assert "libgctcdi" not in cache_listing(bundle / "rootfs")


@needs_root
@pytest.mark.parametrize("kind", ["file", "directory"])
def test_what_the_image_has_at_a_link_is_kept_with_a_warning(bundle, kind):
    """A file or a directory: kept, one warning, the start goes on (as the prestart hook does: one
    behaviour for both; a directory used to fail the start with EISDIR)."""
    target = bundle / "rootfs/opt/vendor/lib/libgctcdi.so"
    if kind == "file":
        target.write_text("image's own file")
    else:
        target.mkdir()
        (target / "inside").write_text("image's own file")
    result = run_hook(["create-symlinks", "--link", "libgctcdi.so.1::/opt/vendor/lib/libgctcdi.so",
                       "--link", "libgctcdi.so.550.54.15::/opt/vendor/lib/libgctcdi.so.1"],
                      {"bundle": str(bundle)})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("nvidia-cdi-hook: warning: not linking /opt/vendor/lib/libgctcdi.so -> libgctcdi.so.1: "
                             "the image has its own file there\n")
    assert (target / "inside" if kind == "directory" else target).read_text() == "image's own file"
    assert os.readlink(bundle / "rootfs/opt/vendor/lib/libgctcdi.so.1") == "libgctcdi.so.550.54.15"


@needs_root
def test_a_restart_keeps_the_links_it_finds_right_and_fixes_the_others(bundle):
    """A restarted container reuses its rootfs: links already right stay (same inode, no warning);
    one the image changed meanwhile is made right again."""
    lib = bundle / "rootfs/opt/vendor/lib"
    args = ["create-symlinks", "--link", "libgctcdi.so.550.54.15::/opt/vendor/lib/libgctcdi.so.1",
            "--link", "libgctcdi.so.1::/opt/vendor/lib/libgctcdi.so"]
    assert run_hook(args, {"bundle": str(bundle)}).returncode == 0
    kept = os.lstat(lib / "libgctcdi.so.1")
    os.unlink(lib / "libgctcdi.so")
    os.symlink("libgctcdi.so.550.54.15", lib / "libgctcdi.so")
    changed = os.lstat(lib / "libgctcdi.so")
    result = run_hook(args, {"bundle": str(bundle)})
    assert (result.returncode, result.stderr) == (0, "")
    assert os.lstat(lib / "libgctcdi.so.1").st_ino == kept.st_ino
    assert os.readlink(lib / "libgctcdi.so") == "libgctcdi.so.1"
    assert os.lstat(lib / "libgctcdi.so").st_ino != changed.st_ino
    assert sorted(p.name for p in lib.iterdir()) == ["libgctcdi.so", "libgctcdi.so.1", "libgctcdi.so.550.54.15"]


def no_temp_files(folder: Path) -> bool:
    return not [p.name for p in folder.iterdir() if p.name.startswith(".")]


@needs_root
def test_an_unchanged_cache_is_left_as_it_is(bundle):
    """ldconfig builds the cache on a scratch tmpfs; a restarted container (same rootfs) keeps its
    /etc/ld.so.cache file (same inode, not rewritten) when nothing changed."""
    root = bundle / "rootfs"
    args = ["update-ldcache", "--folder", "/opt/vendor/lib"]
    assert run_hook(args, {"bundle": str(bundle)}).returncode == 0
    cache = root / "etc/ld.so.cache"
    before = os.stat(cache)
    result = run_hook(args, {"bundle": str(bundle)})
    assert (result.returncode, result.stderr) == (0, "")
    after = os.stat(cache)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert "libgctcdi.so.1 (libc6,x86-64) => /opt/vendor/lib/libgctcdi.so.1" in cache_listing(root)
    assert not os.path.ismount(root / "proc") and os.listdir(root / "proc") == []   # the scratch stayed in the sandbox
    assert no_temp_files(root / "etc")


@needs_root
def test_a_restart_refreshes_a_stale_entry_of_the_image(bundle, tmp_path):
    """The container replaced a library of its own without running ldconfig: the next start's cache
    lists the new one, not the file that is gone (the prestart hook does the same:
    tests/unit/hook/test_ld_cache_restart.py)."""
    root = bundle / "rootfs"
    (root / "opt/image").mkdir(parents=True)
    with open(root / "etc/ld.so.conf", "a") as f:
        f.write("/opt/image\n")
    (tmp_path / "i.c").write_text("int image_probe(void) { return 1; }\n")
    for soname in ("libimage.so.1", "libimage.so.2"):
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", tmp_path / soname,
                        tmp_path / "i.c"], check=True)
    shutil.copy(tmp_path / "libimage.so.1", root / "opt/image")
    args = ["update-ldcache", "--folder", "/opt/vendor/lib"]
    assert run_hook(args, {"bundle": str(bundle)}).returncode == 0
    assert "libimage.so.1 (libc6,x86-64) => /opt/image/libimage.so.1" in cache_listing(root)
    (root / "opt/image/libimage.so.1").unlink()
    shutil.copy(tmp_path / "libimage.so.2", root / "opt/image")
    result = run_hook(args, {"bundle": str(bundle)})
    assert (result.returncode, result.stderr) == (0, "")
    listing = cache_listing(root)
    assert "libimage.so.2 (libc6,x86-64) => /opt/image/libimage.so.2" in listing
    assert "libimage.so.1 " not in listing
    assert "libgctcdi.so.1 (libc6,x86-64) => /opt/vendor/lib/libgctcdi.so.1" in listing


@needs_root
def test_a_changed_cache_replaces_the_old_one(bundle):
    root = bundle / "rootfs"
    assert run_hook(["update-ldcache"], {"bundle": str(bundle)}).returncode == 0
    cache = root / "etc/ld.so.cache"
    before = os.stat(cache)
    result = run_hook(["update-ldcache", "--folder", "/opt/vendor/lib"], {"bundle": str(bundle)})
    assert (result.returncode, result.stderr) == (0, "")
    after = os.stat(cache)
    assert after.st_ino != before.st_ino and (after.st_mode & 0o7777, after.st_nlink) == (0o644, 1)
    assert "=> /opt/vendor/lib/libgctcdi.so.1" in cache_listing(root)
    # what ldconfig itself writes, byte for byte
    own = subprocess.run(["chroot", str(root), "/sbin/ldconfig", "-C", "/tmp/own.cache", "/opt/vendor/lib"],
                         capture_output=True)
    assert own.returncode == 0, own.stderr
    assert cache.read_bytes() == (root / "tmp/own.cache").read_bytes()
    assert no_temp_files(root / "etc")


@needs_root
@pytest.mark.parametrize("proc", ["missing", "symlink", "symlink to etc", "file"])
def test_without_a_proc_folder_ldconfig_writes_the_cache_itself(bundle, library, proc):
    """The scratch tmpfs goes on the root's /proc folder (runtimes make it): without one, as before. A
    symlink is no folder, wherever it leads (followed to /etc, the scratch would hide the image's
    ld.so.conf from ldconfig)."""
    root = bundle / "rootfs"
    os.rmdir(root / "proc")
    if proc.startswith("symlink"):
        os.symlink("etc" if proc == "symlink to etc" else "tmp", root / "proc")
    elif proc == "file":
        (root / "proc").write_text("")
    (root / "opt/image").mkdir()
    shutil.copy(library, root / "opt/image")
    with open(root / "etc/ld.so.conf", "a") as f:
        f.write("/opt/image\n")
    result = run_hook(["update-ldcache", "--folder", "/opt/vendor/lib"], {"bundle": str(bundle)})
    assert (result.returncode, result.stderr) == (0, "")
    listing = cache_listing(root)
    assert "=> /opt/vendor/lib/libgctcdi.so.1" in listing and "=> /opt/image/libgctcdi.so.1" in listing
    assert os.listdir(root / "tmp") == []


@needs_root
def test_a_directory_at_the_cache_is_one_line(bundle):
    (bundle / "rootfs/etc/ld.so.cache").unlink()
    (bundle / "rootfs/etc/ld.so.cache").mkdir()
    assert error_line(run_hook(["update-ldcache"], {"bundle": str(bundle)})) == (
        "ldconfig failed: write the cache: [Errno 21] Is a directory: '/etc/ld.so.cache' "
        f"({bundle}/rootfs)")
    assert no_temp_files(bundle / "rootfs/etc")


@needs_root
@pytest.mark.parametrize("kind", ["symlink", "fifo", "nothing"])
def test_what_a_subverted_ldconfig_leaves_on_the_scratch_is_never_followed(bundle, tmp_path, kind):
    """The sandboxed program may be subverted by the image's files: a link it leaves as its cache is
    not followed (a host file's bytes never reach the container), a FIFO blocks nothing."""
    victim = tmp_path / "victim"
    victim.write_text("host secret\n")
    source = tmp_path / "fake_ldconfig.c"
    action = {"symlink": f'symlink("{victim}", argv[2])', "fifo": "mkfifo(argv[2], 0644)", "nothing": "0"}[kind]
    source.write_text("#include <string.h>\n#include <sys/stat.h>\n#include <unistd.h>\n"
                      "int main(int argc, char **argv) {\n"
                      '    if (argc < 3 || strcmp(argv[1], "-C") != 0) return 3;\n'
                      f"    return {action} == 0 ? 0 : 4;\n}}\n")
    fake = tmp_path / "fake_ldconfig"
    subprocess.run(["gcc", "-static", "-o", fake, source], check=True)
    cache = bundle / "rootfs/etc/ld.so.cache"
    before = cache.read_bytes()
    result = run_hook(["update-ldcache", "--ldconfig-path", f"@{fake}"], {"bundle": str(bundle)}, timeout=20)
    reason = {"symlink": "[Errno 40] Too many levels of symbolic links", "fifo": "[Errno 22] Invalid argument",
              "nothing": "[Errno 2] No such file or directory"}[kind]
    assert error_line(result) == (f"ldconfig failed: read the cache it built: {reason}: '/proc/ld.so.cache' "
                                  f"({bundle}/rootfs)")
    assert cache.read_bytes() == before and victim.read_text() == "host secret\n"


@needs_root
def test_a_failing_ldconfig_is_one_line(bundle):
    result = run_hook(["update-ldcache", "--ldconfig-path", "@/nonexistent/ldconfig"], {"bundle": str(bundle)})
    assert result.returncode == 1
    line, = result.stderr.strip().splitlines()
    assert line.startswith("nvidia-cdi-hook: error: ldconfig failed:") and "/nonexistent/ldconfig" in line


@needs_root
def test_the_output_of_a_failing_ldconfig_is_shown_printable(bundle, tmp_path):
    """ldconfig's last line may name files of the image: C1 controls (U+009B is CSI), bidi overrides,
    line separators and bytes that are not UTF-8 are '?', as ASCII controls are."""
    source = tmp_path / "fake_ldconfig.c"
    source.write_text('#include <stdio.h>\nint main(void) { fputs("ldconfig: first\\n'
                      r'ldconfig: /usr/lib/x\xc2\x9b" "31m\xe2\x80\xae" "evil\x9b" "2J\xe2\x80\xa8" "t\x1b[0m\xc3\xa9\n"'
                      ', stdout); return 1; }\n')
    fake = tmp_path / "fake_ldconfig"
    subprocess.run(["gcc", "-static", "-o", fake, source], check=True)
    result = subprocess.run([str(HOOK), "update-ldcache", "--ldconfig-path", f"@{fake}"],
                            input=json.dumps({"bundle": str(bundle)}).encode(), capture_output=True,
                            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=60)
    assert result.returncode == 1
    assert result.stderr.endswith(f": ldconfig: /usr/lib/x?31m?evil?2J?t?[0m\u00e9) ({bundle}/rootfs)\n".encode())


@needs_root
@pytest.mark.parametrize("stdin", ["", "not json", "[1]"])
def test_a_bad_state_is_one_line(stdin):
    result = subprocess.run([str(HOOK), "update-ldcache"], input=stdin, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    line, = result.stderr.strip().splitlines()
    assert line.startswith("nvidia-cdi-hook: error: ") and line.endswith("(stdin)")


def test_imports_only_the_stdlib_libcontainer_c_two_cdi_readers_and_the_message_line():
    code = ("import sys, json; import hook.cdi_hook, libcontainer_c.rootfs, libcontainer_c.ldconfig; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[3])).stdout
    modules = set(json.loads(out))
    for forbidden in ("click", "yaml", "jsonschema", "pynvml", "ctk", "dataclasses"):
        assert forbidden not in modules, forbidden
    ours = {m for m in modules if m.split(".")[0] in {"hook", "libcontainer_c", "cdi", "runtime_shim", "ctk", "simulator"}}
    assert {m for m in ours if m.split(".")[0] not in ("hook", "libcontainer_c")} == \
        {"cdi", "cdi.json_codec", "cdi.regular_file", "cdi.errors"}


def test_reading_the_state_imports_neither_json_nor_re():
    repo = str(Path(__file__).resolve().parents[3])
    code = (f"import io, sys; sys.path.insert(0, {repo!r}); import hook.cdi_hook as h\n"
            "h.read_state(io.BytesIO(b'{\"bundle\": \"/b\"}'))\n"
            "print(sorted(m for m in ('json', 're') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@needs_hook
@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_help_prints_the_subcommands_and_reads_no_state(flag):
    done = subprocess.run([str(HOOK), flag], capture_output=True, text=True, stdin=subprocess.DEVNULL, env={})
    assert done.returncode == 0 and done.stderr == ""
    assert "create-symlinks  --link TARGET::LINK" in done.stdout
    assert "update-ldcache   --folder DIR" in done.stdout


@needs_hook
def test_help_names_no_module_of_this_project():
    """Users read the help, not the source: it says what the program does, not which module builds what."""
    done = subprocess.run([str(HOOK), "--help"], capture_output=True, text=True, stdin=subprocess.DEVNULL, env={})
    modules = {"cdi", "hook", "ctk", "cli", "runtime_shim", "libcontainer_c", "device_plugin"}
    named = [word for word in done.stdout.replace("(", " ").replace(")", " ").split()
             if word.split(".")[0] in modules and "." in word.strip(".,;:")]
    assert named == []


# -- enable-cuda-compat ---------------------------------------------------------------------------

COMPAT = "usr/local/cuda/compat"


def build_libcuda(path: Path, tmp_path: Path) -> None:
    """A real ELF object with libcuda's soname at path."""
    source = tmp_path / "libcuda.c"
    source.write_text("int cuda_probe(void) { return 1; }\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", path, source], check=True)


def first_libcuda(root: Path) -> str:
    """Where ld.so finds libcuda.so.1 in the rootfs: the first entry of that soname in its cache."""
    lines = [line for line in cache_listing(root).splitlines() if line.strip().startswith("libcuda.so.1 ")]
    return lines[0].split("=> ")[1] if lines else ""


@pytest.fixture
def compat_bundle(bundle, tmp_path):
    """The driver's libcuda in /opt/vendor/lib (a folder the hook is given), the image's forward-compat
    libcuda 999.1.2 in /usr/local/cuda/compat, as NVIDIA's cuda-compat package puts it."""
    root = bundle / "rootfs"
    build_libcuda(root / "opt/vendor/lib/libcuda.so.550.54.15", tmp_path)
    build_libcuda(root / COMPAT / "libcuda.so.999.1.2", tmp_path)
    os.symlink("libcuda.so.999.1.2", root / COMPAT / "libcuda.so.1")
    return bundle


def compat_run(bundle, host_version):
    return run_hook(["create-symlinks", "--link", "libcuda.so.550.54.15::/opt/vendor/lib/libcuda.so.1",
                     "enable-cuda-compat", "--host-driver-version", host_version,
                     "update-ldcache", "--folder", "/opt/vendor/lib"], {"bundle": str(bundle)})


@needs_root
def test_newer_compat_libraries_of_the_image_go_first(compat_bundle):
    root = compat_bundle / "rootfs"
    result = compat_run(compat_bundle, "550.54.15")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert first_libcuda(root) == "/usr/local/cuda/compat/libcuda.so.1"
    # a later ldconfig in the image keeps that order: the folder is first in the drop-in too
    conf = root / "etc/ld.so.conf.d/00-nvidia-cdi-hook.conf"
    assert conf.read_text().splitlines()[1:] == ["/usr/local/cuda/compat", "/opt/vendor/lib"]


@needs_root
@pytest.mark.parametrize("host_version", ["999.0", "1000.3.1"])
def test_compat_libraries_not_newer_than_the_driver_are_left_out(compat_bundle, host_version):
    root = compat_bundle / "rootfs"
    assert compat_run(compat_bundle, host_version).returncode == 0
    assert first_libcuda(root) == "/opt/vendor/lib/libcuda.so.1"
    conf = root / "etc/ld.so.conf.d/00-nvidia-cdi-hook.conf"
    assert conf.read_text().splitlines()[1:] == ["/opt/vendor/lib"]


@needs_root
def test_a_compat_folder_linking_out_of_the_image_is_read_inside_it(bundle, tmp_path):
    """/usr/local/cuda/compat -> a host folder holding a newer libcuda: the link is followed inside the
    rootfs (where that folder does not exist), never on the host."""
    host = tmp_path / "host-compat"
    build_libcuda(host / "libcuda.so.999.1.2", tmp_path)
    root = bundle / "rootfs"
    (root / "usr/local/cuda").mkdir(parents=True)
    os.symlink("../../../../../../../.." + str(host), root / COMPAT)
    build_libcuda(root / "opt/vendor/lib/libcuda.so.550.54.15", tmp_path)
    result = compat_run(bundle, "550.54.15")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert first_libcuda(root) == "/opt/vendor/lib/libcuda.so.1"


@needs_root
def test_two_compat_libraries_are_a_warning(compat_bundle, tmp_path):
    build_libcuda(compat_bundle / "rootfs" / COMPAT / "libcuda.so.998.0", tmp_path)
    result = compat_run(compat_bundle, "550.54.15")
    assert result.returncode == 0
    assert result.stderr == ("nvidia-cdi-hook: warning: not using the CUDA compat libraries in /usr/local/cuda/compat: "
                             "more than one libcuda.so.<version>\n")
    assert first_libcuda(compat_bundle / "rootfs") == "/opt/vendor/lib/libcuda.so.1"


# -- disable-device-node-modification -------------------------------------------------------------

PARAMS = "Mode: 1\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"


def in_mount_namespace(bundle: Path, args, script: str):
    """The hook in a private mount namespace of its own (as in a container's), then `script` there."""
    state = json.dumps({"bundle": str(bundle)}).replace("'", "'\\''")
    hook = " ".join(f"'{a}'" for a in [str(HOOK), *args])
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           f"echo '{state}' | {hook}; echo rc=$?; {script}"],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def params_bundle(tmp_path):
    """A bundle whose rootfs stands in for a container's procfs with the driver's params; the driver's
    own params (a driver root's copy) say ModifyDeviceFiles: 1."""
    bundle = tmp_path / "bundle"
    write_bundle(bundle, "rootfs")
    (bundle / "rootfs/proc/driver/nvidia").mkdir(parents=True)
    (bundle / "rootfs/proc/driver/nvidia/params").write_text("the container's view\n")
    (tmp_path / "driver-params").write_text(PARAMS)
    return bundle


@needs_root
def test_the_containers_params_say_modify_device_files_0(params_bundle, tmp_path):
    target = params_bundle / "rootfs/proc/driver/nvidia/params"
    result = in_mount_namespace(params_bundle, ["disable-device-node-modification", "--params-file",
                                                str(tmp_path / "driver-params")],
                                f"cat {target}; stat -c %a {target}; grep ' {target} ' /proc/self/mountinfo; "
                                f"grep -c ' {target.parent} ' /proc/self/mountinfo")
    lines = result.stdout.splitlines()
    assert lines[0] == "rc=0" and result.stderr == "", result
    assert lines[1:4] == ["Mode: 1", "ModifyDeviceFiles: 0", "DeviceFileUID: 0"]
    assert lines[4] == "444"
    mount = lines[5].split()
    assert set(mount[5].split(",")) >= {"ro", "nosuid", "nodev", "noexec"} and "tmpfs" in mount
    assert lines[6] == "0"   # the tmpfs that held the file is gone from the folder
    assert target.read_text() == "the container's view\n"   # outside the namespace: untouched


@needs_root
@pytest.mark.parametrize("case", ["driver says 0", "no driver params", "no params in the container",
                                  "a link in the image"])
def test_nothing_to_cover(params_bundle, tmp_path, case):
    params = tmp_path / "driver-params"
    target = params_bundle / "rootfs/proc/driver/nvidia/params"
    if case == "driver says 0":
        params.write_text(PARAMS.replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0"))
    elif case == "no driver params":
        params.unlink()
    elif case == "no params in the container":
        target.unlink()
    else:
        target.unlink()
        (tmp_path / "host-file").write_text("host\n")
        os.symlink(str(tmp_path / "host-file"), target)
    result = in_mount_namespace(params_bundle, ["disable-device-node-modification", "--params-file", str(params)],
                                f"grep -c ' {params_bundle}/' /proc/self/mountinfo")
    assert result.stdout.splitlines() == ["rc=0", "0"], result
    warning = ("nvidia-cdi-hook: warning: not covering /proc/driver/nvidia/params: it is not the driver's file\n"
               if case == "a link in the image" else "")
    assert result.stderr == warning
    assert (tmp_path / "host-file").read_text() == "host\n" if case == "a link in the image" else True


# -- update-application-profile -------------------------------------------------------------------

PROFILE = "etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"


def profile_of(mask: int) -> str:
    """NVIDIA's file (docs/reference.md#application-profiles), one line, the mask in lowercase hex."""
    return ('{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x%x]}],'
            '"rules":[{"pattern":[],"profile":"_container_"}]}' % mask)


@pytest.fixture
def profile_bundle(tmp_path):
    """A rootfs whose /dev holds GPU nodes 0, 2 and 70 (a minor the mask cannot hold), the control and
    uvm nodes, and entries named like GPU nodes that are none: a link to nvidia0, a regular file."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    bundle = tmp_path / "bundle"
    write_bundle(bundle, "rootfs")
    dev = bundle / "rootfs/dev"
    dev.mkdir(parents=True)
    for name, minor in (("nvidia0", 0), ("nvidia2", 2), ("nvidia70", 70), ("nvidiactl", 255), ("nvidia-uvm", 1)):
        os.mknod(dev / name, 0o20666, os.makedev(195, minor))
    (dev / "nvidia1").symlink_to("nvidia0")
    (dev / "nvidia3").write_text("not a device\n")
    return bundle


@needs_root
def test_the_application_profile_names_the_containers_gpus(profile_bundle):
    """Issue 27.1: NVIDIA 1.20's update-application-profile: EGLVisibleDGPUDevices of the minors of the
    container's /dev/nvidia<N> char devices (0 and 2 here), written read-only; minor 70 is warned about."""
    result = run_hook(["update-application-profile"], {"bundle": str(profile_bundle)})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("nvidia-cdi-hook: warning: GPU device nodes with a minor of 64 or more cannot be in "
                             "the application profile: 1 left out\n")
    profile = profile_bundle / "rootfs" / PROFILE
    assert profile.read_text() == profile_of(0b101)
    assert (profile.stat().st_mode & 0o777, profile.parent.stat().st_mode & 0o777) == (0o444, 0o755)
    before = profile.stat()
    assert run_hook(["update-application-profile"], {"bundle": str(profile_bundle)}).returncode == 0
    assert (profile.stat().st_ino, profile.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # a restart


@needs_root
def test_no_gpu_node_no_profile(profile_bundle):
    for name in ("nvidia0", "nvidia2", "nvidia70"):
        (profile_bundle / "rootfs/dev" / name).unlink()
    result = run_hook(["update-application-profile"], {"bundle": str(profile_bundle)})
    assert (result.returncode, result.stderr) == (0, "")
    assert not (profile_bundle / "rootfs/etc").exists()


@needs_root
def test_the_profile_never_goes_through_the_images_links(profile_bundle, tmp_path):
    """The image's /etc/nvidia links to a host folder and its 10-container.conf... is never written
    through: the folder resolves inside the rootfs, and a link at the file is replaced, not followed."""
    host = tmp_path / "host-etc-nvidia"
    host.mkdir()
    etc = profile_bundle / "rootfs/etc"
    etc.mkdir()
    (etc / "nvidia").symlink_to(str(host))   # absolute: inside the rootfs it names rootfs + that path
    result = run_hook(["update-application-profile"], {"bundle": str(profile_bundle)})
    # dangling inside the rootfs: nothing written anywhere, a warning, the container starts
    assert (result.returncode, result.stderr) == (0, "nvidia-cdi-hook: warning: not writing /etc/nvidia/nvidia-"
                                                     "application-profiles-rc.d/10-container.conf: No such file or "
                                                     "directory\n")
    assert list(host.iterdir()) == []
    (profile_bundle / "rootfs" / str(host).lstrip("/")).mkdir(parents=True)
    assert run_hook(["update-application-profile"], {"bundle": str(profile_bundle)}).returncode == 0
    assert list(host.iterdir()) == []
    inside = profile_bundle / "rootfs" / str(host).lstrip("/") / "nvidia-application-profiles-rc.d/10-container.conf"
    assert inside.read_text() == profile_of(0b101)
    (etc / "nvidia").unlink()
    (etc / "nvidia/nvidia-application-profiles-rc.d").mkdir(parents=True)
    (tmp_path / "host-file").write_text("host\n")
    (profile_bundle / "rootfs" / PROFILE).symlink_to(str(tmp_path / "host-file"))
    assert run_hook(["update-application-profile"], {"bundle": str(profile_bundle)}).returncode == 0
    assert (tmp_path / "host-file").read_text() == "host\n"
    assert not (profile_bundle / "rootfs" / PROFILE).is_symlink()
    assert (profile_bundle / "rootfs" / PROFILE).read_text() == profile_of(0b101)
