"""Tests change nothing of the machine's /run, /etc, /dev/shm or /var, not even for a moment: a few
of them run (a child pytest) in a mount namespace where the places podman, runtimes, `mount` and the
tests would write to at fixed paths are empty dirs of their own, watched with inotify; a file made
there and removed again is seen, which the suite's leftover check cannot see. Podman runs in a
namespace of its own below that one (tests.e2e.engines.PrivatePodman), runc and `mount` are told to
keep off /run, so nothing is to be seen."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.support.inotify import DirWatch
from tests.support.mountns import in_namespace, namespace_holder, needed_paths, own_dir_at, stop_holder

pytestmark = pytest.mark.e2e

# the machine's places a test could write to: the CDI spec dirs (/var/run is /run), runc's and crun's
# state, /run/libpod, /run/containers, the runtime caches, libmount's /run/mount, podman's SHM locks,
# blob info cache, CNI lock and cache, its temp files
WATCHED = {"/run": "0755", "/etc/cdi": "0755", "/etc/cni/net.d": "0755", "/dev/shm": "1777",
           "/var/lib/containers": "0700", "/var/lib/cni": "0755", "/var/tmp": "1777"}
CHILD_TESTS = {
    # one test of each way the tests use podman: a spec installed for cdi_podman and for a module's
    # podman, podman running our runtime shim (whose default cache dir is /run/nvidia-container-toolkit)
    "podman": ("tests/e2e/test_podman_cdi_spec.py::test_podman_refuses_an_unknown_cdi_device",
               "tests/e2e/test_cdi_generate_podman.py::test_all_gets_every_device",
               "tests/e2e/test_shim_engines.py::test_podman_with_the_shim_as_runtime"),
    # the real runc without --root (its default state dir is /run/runc), `mount` in a namespace
    # (libmount makes /run/mount unless -n)
    "runc and mount": ("tests/unit/runtime_shim/test_runc_argv.py", "tests/unit/cdi_hook/test_cdi_hook_namespace.py"),
    # MPS control daemons (default pipe dir /tmp/nvidia-mps, log dir /var/log/nvidia-mps), their shm tmpfs
    # and nvidia-ctk mps (default root /run/nvidia/mps): each test gives its own dirs
    "mps": ("tests/unit/simulator/test_mps_control.py", "tests/unit/ctk/test_mps_cmd.py", "tests/e2e/test_mps_share.py"),
}


def watched_places() -> list[str]:
    """(the guard's namespace_holder setup) Each of WATCHED an empty dir of this namespace; returns the
    dirs to watch (own_dir_at)."""
    tops = []
    for path, mode in WATCHED.items():
        tops += own_dir_at(path, "gct-guard", mode=mode)
    return tops


@pytest.mark.parametrize("tests", CHILD_TESTS.values(), ids=CHILD_TESTS.keys())
def test_the_tests_write_nothing_at_the_machines_fixed_places(tests):
    if os.geteuid() != 0 or shutil.which("podman") is None:
        pytest.skip("needs root and podman")
    checkout = needed_paths()[0]
    guard = namespace_holder(f"{__name__}:watched_places")
    try:
        with DirWatch({top: f"/proc/{guard.pid}/root{top}" for top in guard.prepared}) as watch:
            child = subprocess.run(in_namespace(guard, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                        *(f"{checkout}/{test}" for test in tests)]),
                                   capture_output=True, text=True, timeout=900)
            changes = watch.changes()
    finally:
        stop_holder(guard)
    assert changes == [], "the tests wrote at the machine's fixed places:\n" + "\n".join(changes)
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-2000:]
    assert " passed" in child.stdout and " skipped" not in child.stdout, child.stdout[-3000:]
