"""nvidia-cdi-hook: argument chains (ours and NVIDIA's), the rootfs from the state, and real runs of the
installed launcher on a busybox + glibc rootfs with the host's ldconfig."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hook.cdi_hook import HookError, parse_args, read_state, rootfs_from_state
from tests.e2e.rootfs import make_rootfs

HOOK = Path(sys.executable).parent / "nvidia-cdi-hook"
LIB = "/usr/lib/x86_64-linux-gnu"


# -- arguments ------------------------------------------------------------------------------------

def test_one_chain_of_both_subcommands():
    tasks = parse_args(["create-symlinks", "--link", "libcuda.so.1::/usr/lib/libcuda.so",
                        "--link=libnvidia-ml.so.550::/usr/lib/libnvidia-ml.so.1",
                        "update-ldcache", "--folder", "/usr/lib", "--folder", "/usr/lib", "--ldconfig-path", "@/x/ldconfig"])
    assert tasks.links == [("libcuda.so.1", "/usr/lib/libcuda.so"), ("libnvidia-ml.so.550", "/usr/lib/libnvidia-ml.so.1")]
    assert tasks.folders == ["/usr/lib"] and tasks.update_ldcache and tasks.ldconfig == "/x/ldconfig"
    assert tasks.warnings == []


@pytest.mark.parametrize("args", [
    ["create-symlinks", "--link", "libcuda.so.1::/usr/lib64/libcuda.so"],          # nvidia-cdi-hook
    ["hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib64/libcuda.so"],  # nvidia-ctk hook
    ["--debug", "create-symlinks", "--host-root", "/", "--link", "libcuda.so.1::/usr/lib64/libcuda.so"],
])
def test_nvidias_spellings(args):
    tasks = parse_args(args)
    assert tasks.links == [("libcuda.so.1", "/usr/lib64/libcuda.so")] and not tasks.warnings


def test_unknown_subcommands_and_options_are_warnings_not_failures():
    tasks = parse_args(["enable-cuda-compat", "--host-driver-version", "550", "create-symlinks", "--link",
                        "a::/b", "--new-flag", "value", "--other=1", "update-ldcache", "--folder", "/l",
                        "chmod", "--mode", "755", "--path", "/dev/dri"])
    assert tasks.links == [("a", "/b")] and tasks.folders == ["/l"]
    assert tasks.warnings == ["ignoring unknown subcommand 'enable-cuda-compat'",
                              "ignoring unknown option '--new-flag' of create-symlinks",
                              "ignoring unknown option '--other' of create-symlinks",
                              "ignoring unknown subcommand 'chmod'"]
    assert parse_args(["chmod", "--mode", "755"]).empty


@pytest.mark.parametrize("args, message", [
    (["create-symlinks", "--link", "no-separator"], "invalid link 'no-separator'"),
    (["create-symlinks", "--link", "a::relative/link"], "invalid link"),
    (["create-symlinks", "--link"], "option --link needs a value"),
    (["update-ldcache", "--folder", "lib"], "folder 'lib' is not an absolute path"),
    (["update-ldcache", "--ldconfig-path", "ldconfig"], "must be an absolute host path"),
])
def test_malformed_values_of_known_options_are_errors(args, message):
    with pytest.raises(HookError, match=message):
        parse_args(args)


# -- the rootfs -----------------------------------------------------------------------------------

def write_bundle(bundle: Path, root_path: str) -> None:
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "root": {"path": root_path}}))


def test_rootfs_comes_from_the_bundle_not_the_cwd(tmp_path, monkeypatch):
    write_bundle(tmp_path / "bundle", "rootfs")
    monkeypatch.chdir("/")
    assert rootfs_from_state({"bundle": str(tmp_path / "bundle")}) == str(tmp_path / "bundle/rootfs")
    assert rootfs_from_state({"bundlePath": str(tmp_path / "bundle")}) == str(tmp_path / "bundle/rootfs")
    write_bundle(tmp_path / "b2", "/somewhere/else/")
    assert rootfs_from_state({"bundle": str(tmp_path / "b2")}) == "/somewhere/else"


@pytest.mark.parametrize("state, message", [
    ({}, "container state has no absolute bundle path"),
    ({"bundle": "relative"}, "container state has no absolute bundle path"),
    ({"bundle": "/nonexistent-bundle"}, "cannot read the container's config: No such file or directory"),
])
def test_bad_states(state, message):
    with pytest.raises(HookError, match=message):
        rootfs_from_state(state)


def test_a_config_without_root_path(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(HookError, match="container config has no root.path"):
        rootfs_from_state({"bundle": str(tmp_path)})


def test_deeply_nested_json_is_an_error_not_a_traceback(tmp_path):
    """json.loads raises RecursionError (not a ValueError) for deep nesting: still one HookError."""
    deep = "[" * 200_000 + "]" * 200_000
    (tmp_path / "config.json").write_text('{"root": {"path": "rootfs"}, "x": ' + deep + "}")
    with pytest.raises(HookError, match="invalid container config"):
        rootfs_from_state({"bundle": str(tmp_path)})
    with pytest.raises(HookError, match="invalid container state"):
        read_state(io.BytesIO(deep.encode()))


def test_a_config_that_is_a_fifo_is_an_error_without_blocking(tmp_path):
    import signal

    os.mkfifo(tmp_path / "config.json")

    def timeout(signum, frame):
        raise TimeoutError("load_container_config blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(5)
    try:
        with pytest.raises(HookError, match="not a regular file"):
            rootfs_from_state({"bundle": str(tmp_path)})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- real runs of the installed program -----------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not HOOK.exists() or not os.path.exists("/sbin/ldconfig"),
                                reason="needs root, the installed launcher (make venv) and /sbin/ldconfig")


def run_hook(args, state, cwd="/", env=None):
    return subprocess.run([str(HOOK), *args], input=json.dumps(state), capture_output=True, text=True,
                          cwd=cwd, env=env if env is not None else {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                          timeout=60)


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
    result = run_hook(args, {"ociVersion": "1.0.2", "id": "c", "status": "creating", "pid": 1,
                             "bundle": str(bundle)}, cwd=str(root))
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
def test_a_file_the_image_has_at_a_link_is_kept_with_a_warning(bundle):
    target = bundle / "rootfs/opt/vendor/lib/libgctcdi.so"
    target.write_text("image's own file")
    result = run_hook(["create-symlinks", "--link", "libgctcdi.so.1::/opt/vendor/lib/libgctcdi.so"],
                      {"bundle": str(bundle)})
    assert result.returncode == 0
    assert "warning: not linking /opt/vendor/lib/libgctcdi.so -> libgctcdi.so.1" in result.stderr
    assert target.read_text() == "image's own file"


@needs_root
def test_a_failing_ldconfig_is_one_line(bundle):
    result = run_hook(["update-ldcache", "--ldconfig-path", "@/nonexistent/ldconfig"], {"bundle": str(bundle)})
    assert result.returncode == 1
    line, = result.stderr.strip().splitlines()
    assert line.startswith("nvidia-cdi-hook: error: ldconfig failed:") and "/nonexistent/ldconfig" in line


@needs_root
@pytest.mark.parametrize("stdin", ["", "not json", "[1]"])
def test_a_bad_state_is_one_line(stdin):
    result = subprocess.run([str(HOOK), "update-ldcache"], input=stdin, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    line, = result.stderr.strip().splitlines()
    assert line.startswith("nvidia-cdi-hook: error: ") and line.endswith("(stdin)")


def test_imports_only_the_stdlib_and_libcontainer_c():
    code = ("import sys, json; import hook.cdi_hook, libcontainer_c.rootfs, libcontainer_c.ldconfig; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[3])).stdout
    modules = set(json.loads(out))
    for forbidden in ("click", "yaml", "jsonschema", "pynvml", "cdi", "ctk", "dataclasses"):
        assert forbidden not in modules, forbidden
    ours = {m.split(".")[0] for m in modules} & {"hook", "libcontainer_c", "cdi", "runtime_shim", "ctk", "simulator"}
    assert ours == {"hook", "libcontainer_c"}


@pytest.mark.parametrize("data", [
    b'{"bundle": "/b", "pid": 1}', b' \t\n{"a": [1, 2.5e3, -0, true, false, null, "\\u00e9\\n"]}\r\n', b"[]",
    "{\"caf\u00e9\": \"\u2603\"}".encode(), b'[NaN, Infinity, -Infinity]', b'{"a": 1, "a": 2}', b"\xef\xbb\xbf{}",
    '{"a": 1}'.encode("utf-16"), b"", b" ", b"not json", b'{"a": 1} x', b'{"a": 1}{}', b'{"a": }', b'["\x01"]',
    b"\xff{}", b"1" * 5000, b"[" * 100000, b'{"a": 1}\x00', b"\x00{}",
])
def test_parse_json_is_json_loads(data):
    """The hook's JSON reader (the C scanner without the json package) gives what json.loads gives:
    the same value, or the same error."""
    from hook.cdi_hook import parse_json

    def outcome(loads):
        try:
            return "value", repr(loads(data))
        except (ValueError, RecursionError) as e:
            return type(e).__name__, str(e)

    assert outcome(parse_json) == outcome(json.loads)


def test_reading_the_state_imports_neither_json_nor_re():
    repo = str(Path(__file__).resolve().parents[3])
    code = (f"import io, sys; sys.path.insert(0, {repo!r}); import hook.cdi_hook as h\n"
            "h.read_state(io.BytesIO(b'{\"bundle\": \"/b\"}'))\n"
            "print(sorted(m for m in ('json', 're') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_subcommands_and_reads_no_state(flag):
    done = subprocess.run([sys.executable, "-m", "hook.cdi_hook", flag], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0 and done.stderr == ""
    assert "create-symlinks  --link TARGET::LINK" in done.stdout
    assert "update-ldcache   --folder DIR" in done.stdout
