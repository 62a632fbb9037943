"""The C helper's live-injection pieces under real runtimes, at prestart, without the hook program.

A tiny prestart hook (this file's HOOK source, run with the venv's Python) uses only the public API:
RootfsBatch into the container's mount namespace (a checked device node, a library, its SONAME link,
/proc/driver/nvidia only where it exists), a device cgroup v1 rule, and the sandboxed ldconfig. The
container then shows what it got; the host's mount table must be unchanged afterwards.
"""
import json
import os
import stat
import subprocess
import sys
import uuid

import pytest

from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.support.mountns import mountinfo_lines

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(os.geteuid() != 0, reason="runtimes need root")]

LIBDIR = "/usr/lib/x86_64-linux-gnu"

HOOK = r'''
import json, os, sys
from libcontainer_c.batch import RootfsBatch
from libcontainer_c.device_cgroup import allow_devices, device_rule, devices_cgroup_of
from libcontainer_c.ldconfig import run_ldconfig
from libcontainer_c.rootfs import LIBRARY

state = json.load(sys.stdin)
bundle = state.get("bundle") or state["bundlePath"]
with open(os.path.join(bundle, "config.json")) as f:
    root = json.load(f)["root"]["path"]
rootfs = os.path.normpath(os.path.join(bundle, root))
lib = os.environ["GCT_TEST_LIB"]
name = os.path.basename(lib)
with RootfsBatch() as batch:
    batch.bind_device(os.environ["GCT_TEST_NODE"], "/dev/nvidia0", 195, 0)
    batch.bind(lib, "LIBDIR/" + name, LIBRARY)
    batch.symlink(name, "LIBDIR/libgctprobe.so.1")
    batch.tmpfs("/proc/driver/nvidia", if_exists=True)
    batch.run(rootfs=rootfs, pid=state["pid"])
allow_devices(devices_cgroup_of(state["pid"]), [device_rule("c", 195, 0, "rw")])
run_ldconfig(rootfs, ["LIBDIR"], pid=state["pid"])
'''.replace("LIBDIR", LIBDIR)

SCRIPT = (f"grep ' {LIBDIR}/\\| /dev/nvidia0 ' /proc/self/mountinfo | cut -d' ' -f5,6; "
          "echo ---; ldconfig -p | grep -c gctprobe; "
          f"readlink {LIBDIR}/libgctprobe.so.1; "
          "echo ---; (exec 3<>/dev/nvidia0) 2>&1; true")


@pytest.fixture(scope="module")
def probe_library(tmp_path_factory):
    out = tmp_path_factory.mktemp("probe")
    (out / "probe.c").write_text("int gct_probe(void) { return 7; }\n")
    lib = out / "libgctprobe.so.1.0.0"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libgctprobe.so.1", "-o", lib,
                    out / "probe.c"], check=True)
    return lib


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_prestart_injection_with_the_public_api(runtime, tmp_path, probe_library):
    if runtime == "crun":
        ensure_hugetlb_on_v1()
    node = tmp_path / "nvidia0"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(195, 0))
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", SCRIPT], glibc=True)
    config = json.loads((bundle / "config.json").read_text())
    config["hooks"] = {"prestart": [{
        "path": sys.executable, "args": [sys.executable, "-I", str(hook)],
        "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", f"GCT_TEST_NODE={node}",
                f"GCT_TEST_LIB={probe_library}"]}]}
    (bundle / "config.json").write_text(json.dumps(config))
    host_table = mountinfo_lines()

    cid = f"gct-lc-{uuid.uuid4().hex[:10]}"
    state_root = tmp_path / "state"
    result = subprocess.run([runtime, "--root", str(state_root), "run", "--bundle", str(bundle), cid],
                            capture_output=True, text=True, timeout=60)
    subprocess.run([runtime, "--root", str(state_root), "delete", "--force", cid], capture_output=True)
    assert result.returncode == 0, result.stderr + result.stdout
    mounts, cache, access = result.stdout.split("---\n")
    points = dict(line.split() for line in mounts.splitlines())
    assert set(points) == {f"{LIBDIR}/libgctprobe.so.1.0.0", "/dev/nvidia0"}
    assert "noexec" not in points[f"{LIBDIR}/libgctprobe.so.1.0.0"]
    assert "nodev" not in points["/dev/nvidia0"].split(",")
    # the container's ld.so.cache lists the library once; its SONAME link points at it
    assert cache.split() == ["1", "libgctprobe.so.1.0.0"]
    # the cgroup allows the node (ENXIO: no driver behind it) instead of denying it (EPERM)
    assert "No such device or address" in access, access
    assert mountinfo_lines() == host_table
