"""nvidia-cdi-hook as a createRuntime hook: started in the runtime's mount namespace, it joins the one
of the state's pid (the container's init, waiting) and does its work there, where the container's
mounts are; as a createContainer hook (runc's state says pid 1, crun's 0, and the hook is in the
container's pid namespace) it stays where it is.

The container's init is stood in for by a process in a private mount namespace of its own in which
the rootfs' library placeholder (an empty file, as a runtime leaves it) has the library bind-mounted
on it. ldconfig lists a library only where it sees the real file, and the params copy is mounted
where the hook is: both tell which namespace the hook worked in."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.rootfs import make_rootfs
from tests.e2e.bundle import userns_work_dir
from tests.support.mountns import in_user_namespace, process_in_mount_ns
from tests.unit.cdi_hook.test_cdi_hook import (HOOK, PARAMS, cache_listing, error_line, library,  # noqa: F401
                                               needs_root, run_hook, write_bundle)         # (library: a fixture)

LIBRARY_DIR = "/opt/vendor/lib"
LIBRARY = "libgctcdi.so.550.54.15"
PARAMS_PATH = "proc/driver/nvidia/params"
ARGS = ["create-symlinks", "--link", f"{LIBRARY}::{LIBRARY_DIR}/libgctcdi.so.1",
        "update-ldcache", "--folder", LIBRARY_DIR]


@pytest.fixture
def bundle(tmp_path):
    """A glibc rootfs with an empty placeholder where the runtime mounts the library, and a procfs
    stand-in holding the container's params; the driver's own params say ModifyDeviceFiles: 1."""
    bundle = tmp_path / "bundle"
    write_bundle(bundle, "rootfs")
    root = make_rootfs(bundle / "rootfs", glibc=True)
    (root / LIBRARY_DIR.lstrip("/")).mkdir(parents=True)
    (root / LIBRARY_DIR.lstrip("/") / LIBRARY).touch()
    (root / PARAMS_PATH).parent.mkdir(parents=True)
    (root / PARAMS_PATH).write_text("the container's view\n")
    (tmp_path / "driver-params").write_text(PARAMS)
    return bundle


@pytest.fixture
def container_init(bundle, library):
    """A process standing in for the container's init: its own private mount namespace with the library
    mounted on the placeholder; it waits until the test ends."""
    with process_in_mount_ns(binds=[(library, bundle / "rootfs" / LIBRARY_DIR.lstrip("/") / LIBRARY)]) as pid:
        yield pid


def state(bundle: Path, pid: int, status: str = "creating") -> dict:
    return {"ociVersion": "1.0.2", "id": "c", "status": status, "pid": pid, "bundle": str(bundle)}


def params_mounts(pid: int | str, bundle: Path) -> int:
    """How many mounts the namespace of pid has on the rootfs' params."""
    target = f" {bundle}/rootfs/{PARAMS_PATH} "
    return Path(f"/proc/{pid}/mountinfo").read_text().count(target)


def run_in_runtime_namespace(args, doc, prefix=()):
    """The hook as a createRuntime hook runs, from a namespace of its own standing in for the
    runtime's (so that a params mount made here, had the hook stayed, goes with it): the state on
    stdin; its stdout says whether the params got mounted in that namespace."""
    script = f"'{HOOK}' \"$@\" <<'EOF'\n{json.dumps(doc)}\nEOF\nrc=$?\ngrep -c '/{PARAMS_PATH} ' /proc/self/mountinfo\n" \
             "exit $rc"
    return subprocess.run([*prefix, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *args],
                          capture_output=True, text=True, timeout=60)


@needs_root
@pytest.mark.parametrize("status", ["creating", "created"])   # runc's word, crun's
def test_a_create_runtime_hook_works_in_the_containers_mount_namespace(bundle, container_init, tmp_path, status):
    root = bundle / "rootfs"
    args = [*ARGS, "disable-device-node-modification", "--params-file", str(tmp_path / "driver-params")]
    result = run_in_runtime_namespace(args, state(bundle, container_init, status))
    assert result.returncode == 0 and result.stderr == "", result
    assert result.stdout == "0\n"                 # nothing mounted where the hook was started
    # the library the container's namespace has, and only it, is in the cache
    assert f"libgctcdi.so.1 (libc6,x86-64) => {LIBRARY_DIR}/libgctcdi.so.1" in cache_listing(root)
    assert os.readlink(root / LIBRARY_DIR.lstrip("/") / "libgctcdi.so.1") == LIBRARY
    assert params_mounts(container_init, bundle) == 1
    params = subprocess.run(["nsenter", "-m", "-t", str(container_init), "cat", str(root / PARAMS_PATH)],
                            capture_output=True, text=True, check=True).stdout
    assert "ModifyDeviceFiles: 0" in params
    assert (root / PARAMS_PATH).read_text() == "the container's view\n"   # in this namespace: untouched


@needs_root
@pytest.mark.parametrize("case", ["pid 0 (crun's createContainer state)", "running", "stopped", "no status",
                                  "pid as a float", "pid as a string"])
def test_otherwise_the_hook_stays_where_it_is(bundle, container_init, tmp_path, case):
    """Not a waiting init's pid: the work is done in the hook's own namespace (where a createContainer
    hook already is the container's), so here ldconfig finds only the empty placeholder."""
    doc = state(bundle, container_init)
    if case.startswith("pid 0"):
        doc["pid"] = 0
    elif case in ("running", "stopped"):
        doc["status"] = case
    elif case == "no status":
        del doc["status"]
    elif case == "pid as a float":
        doc["pid"] = float(container_init)
    else:
        doc["pid"] = str(container_init)
    args = [*ARGS, "disable-device-node-modification", "--params-file", str(tmp_path / "driver-params")]
    result = run_in_runtime_namespace(args, doc)
    assert result.returncode == 0, result
    assert result.stdout == "1\n"                 # the params copy went where the hook was
    assert "libgctcdi" not in cache_listing(bundle / "rootfs")
    assert params_mounts(container_init, bundle) == 0


@needs_root
@pytest.mark.parametrize("pid", ["1", "init"])   # runc's createContainer state; any pid
def test_a_hook_in_another_pid_namespace_than_procs_stays(bundle, container_init, pid):
    """A createContainer hook runs in the container's pid namespace with the host's /proc (runc's state
    then says pid 1): the pid it reads for itself there differs from its own, and it never takes the
    state's pid as its init."""
    doc = state(bundle, 1 if pid == "1" else container_init)
    result = run_in_runtime_namespace(ARGS, doc, prefix=("unshare", "--pid", "--fork"))
    assert result.returncode == 0, result
    assert "libgctcdi" not in cache_listing(bundle / "rootfs")


@needs_root
def test_crun_s_bundle_slash_is_the_waiting_init_s_directory(bundle, library):
    """crun hands createRuntime hooks `"bundle": "/"` in a container with a user namespace and devices:
    the bundle is then the directory the init was started in."""
    binds = [(library, bundle / "rootfs" / LIBRARY_DIR.lstrip("/") / LIBRARY)]
    with process_in_mount_ns(binds=binds, cwd=bundle) as init:
        result = run_in_runtime_namespace(ARGS, {"ociVersion": "1.0", "id": "c", "pid": init, "root": "rootfs",
                                                 "bundle": "/", "status": "created"})
    assert result.returncode == 0 and result.stderr == "", result
    assert f"libgctcdi.so.1 (libc6,x86-64) => {LIBRARY_DIR}/libgctcdi.so.1" in cache_listing(bundle / "rootfs")


@needs_root
def test_an_init_that_is_gone_is_one_line(bundle):
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    assert error_line(run_hook(ARGS, state(bundle, int(gone)))) == \
        f"cannot open the container's mount namespace: No such file or directory (/proc/{gone}/ns/mnt)"


@needs_root
def test_pid_1_is_refused(bundle, tmp_path):
    """pid 1 in the pid namespace of the hook's /proc is that namespace's init (the machine's), never a
    waiting container's: the hook would work in the machine's mount namespace. Here pid 1 is the shell
    of a pid namespace of its own with its own /proc, in the private namespace the hook starts in, so
    nothing reaches the machine even if the hook did its work."""
    args = [*ARGS, "disable-device-node-modification", "--params-file", str(tmp_path / "driver-params")]
    result = run_in_runtime_namespace(args, state(bundle, 1),
                                      prefix=("unshare", "--pid", "--fork", "--mount-proc"))
    assert result.stdout == "0\n", result             # no params copy mounted where the hook was
    assert error_line(result) == "the container state's pid is 1, not a container's init: refusing to work " \
        "in the machine's mount namespace (stdin)"
    assert "libgctcdi" not in cache_listing(bundle / "rootfs")
    assert not (bundle / "rootfs" / LIBRARY_DIR.lstrip("/") / "libgctcdi.so.1").is_symlink()


def own_namespace_script(library: Path, bundle: Path, pid: str) -> str:
    """In the namespace the hook starts in: the library on the placeholder, the hook given `pid` (a
    shell expression) as the waiting init, then how many params copies that namespace has."""
    placeholder = bundle / "rootfs" / LIBRARY_DIR.lstrip("/") / LIBRARY
    return (f"mount -n --bind '{library}' '{placeholder}' || exit 9\n"
            f"sleep 300 & sleeper=$!\n"
            f"'{HOOK}' \"$@\" <<EOF\n{{\"status\": \"creating\", \"pid\": {pid}, \"bundle\": \"{bundle}\"}}\nEOF\n"
            f"rc=$?; kill $sleeper; grep -c '/{PARAMS_PATH} ' /proc/self/mountinfo; exit $rc")


@needs_root
def test_an_init_in_the_hooks_own_namespace_is_refused(bundle, library, tmp_path):
    """The state's pid in the hook's own mount namespace, not the process running the hook: the hook
    was started where the container is not (a createRuntime hook in the runtime's namespace, given a
    pid of that namespace) and would mount the params copy there, on the host."""
    args = [*ARGS, "disable-device-node-modification", "--params-file", str(tmp_path / "driver-params")]
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                             own_namespace_script(library, bundle, "$sleeper"), "sh", *args],
                            capture_output=True, text=True, timeout=60)
    assert result.stdout == "0\n", result
    line = error_line(result)
    assert line.startswith("the container's init shares the hook's mount namespace: refusing to work outside "
                           "a container's (/proc/") and line.endswith("/ns/mnt)"), line
    assert "libgctcdi" not in cache_listing(bundle / "rootfs")


@needs_root
def test_runcs_create_container_hook_without_a_pid_namespace_works_where_it_is(bundle, library, tmp_path):
    """runc runs a createContainer hook from the container's init: in a container without a pid
    namespace of its own the state's pid is the hook's parent, in the hook's mount namespace (the
    container's), and the work is done there."""
    args = [*ARGS, "disable-device-node-modification", "--params-file", str(tmp_path / "driver-params")]
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                             own_namespace_script(library, bundle, "$$"), "sh", *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result
    assert result.stdout == "1\n"
    assert "libgctcdi.so.1" in cache_listing(bundle / "rootfs")


@needs_root
def test_in_a_user_namespace_files_are_made_for_its_root():
    """The init in a user namespace of its own (ids 0-65535 the host's 100000-165535) with a tmpfs volume it
    mounted: that file system cannot map the host's root the hook runs as (EOVERFLOW); the hook makes its
    link there as the host ids of the namespace's root."""
    with userns_work_dir() as work:
        bundle = work / "bundle"
        write_bundle(bundle, "rootfs")
        (bundle / "rootfs/opt/volume").mkdir(parents=True)
        init = in_user_namespace(f"mount -n -t tmpfs tmpfs '{bundle}/rootfs/opt/volume' && echo ready && exec sleep 120",
                                 100000, 100000)
        try:
            assert init.stdout.readline() == "ready\n"
            result = run_in_runtime_namespace(["create-symlinks", "--link", "target::/opt/volume/link"],
                                              state(bundle, init.pid))
            assert result.returncode == 0 and result.stderr == "", result
            seen = subprocess.run(["nsenter", "-m", "-t", str(init.pid), "stat", "-c", "%N %u:%g",
                                   f"{bundle}/rootfs/opt/volume/link"], capture_output=True, text=True, check=True)
            assert seen.stdout == f"'{bundle}/rootfs/opt/volume/link' -> 'target' 100000:100000\n"
        finally:
            init.kill()
            init.wait()
