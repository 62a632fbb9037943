"""The injector on a cgroup v2 host: in a test cgroup under the cgroup2 mount with a runtime-style
device program attached (deny all but /dev/null and /dev/zero), hook.inject replaces that program
with one that allows exactly the injected GPU nodes and keeps the runtime's verdicts for everything
else. Checked with open() from a process inside the cgroup: ENXIO = allowed (no driver), EPERM = denied.

The "container" is a process in its own private mount namespace (unshare) placed in the test cgroup;
the injection runs against it exactly as the prestart hook would (a batch child in its namespace),
and the mounts vanish with it.
"""
from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import time
import uuid

import pytest

from tests.e2e.hook_support import make_simulated_host, require_root_and

pytestmark = pytest.mark.e2e

CHECK = r"""
import os, sys
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
for path in sys.argv[2:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        print(path, 0)
    except OSError as e:
        print(path, e.errno)
"""


def _cgroup2_hierarchy() -> str | None:
    from libcontainer_c.device_cgroup import find_cgroup2_hierarchy

    try:
        return find_cgroup2_hierarchy()
    except OSError:
        return None


@pytest.fixture
def cgroup():
    hierarchy = _cgroup2_hierarchy()
    if hierarchy is None:
        pytest.skip("no cgroup2 mount")
    name = f"gct-hook-{uuid.uuid4().hex[:10]}"
    os.mkdir(os.path.join(hierarchy, name))
    try:
        yield hierarchy, "/" + name
    finally:
        for _ in range(100):
            try:
                os.rmdir(os.path.join(hierarchy, name))
                break
            except OSError as err:
                if err.errno != errno.EBUSY:
                    raise
                time.sleep(0.05)


def _container(cgroup_dir: str) -> subprocess.Popen:
    """A process in a private mount namespace, moved into the cgroup, waiting on stdin."""
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                             f'echo $$ > {cgroup_dir}/cgroup.procs && echo ready && read line'],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _open_errnos(cgroup_dir: str, paths) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-I", "-c", CHECK, f"{cgroup_dir}/cgroup.procs", *map(str, paths)],
                         capture_output=True, text=True, check=True).stdout
    return {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in out.splitlines()}


def test_replacement_program_allows_the_injected_nodes_and_keeps_the_runtime_rules(cgroup, tmp_path):
    require_root_and("unshare", "gcc")
    from libcontainer_c.device_cgroup import DeviceRule, device_programs_attached, install_device_program

    hierarchy, path = cgroup
    cgroup_dir = hierarchy + path
    # what a runtime attaches: deny everything, then /dev/null and /dev/zero
    install_device_program(path, [DeviceRule("a", "*", "*", "rwm", allow=False), DeviceRule("c", 1, 3, "rwm"),
                                  DeviceRule("c", 1, 5, "rwm")], hierarchy)
    host = tmp_path / "host"
    make_simulated_host(host, gpus=2, mig=None)
    rootfs = tmp_path / "rootfs"
    (rootfs / "dev").mkdir(parents=True)
    probes = {}
    for name, (major, minor) in {"gpu0": (195, 0), "gpu1": (195, 1), "ctl": (195, 255), "zero": (1, 5),
                                 "null": (1, 3), "random": (1, 8)}.items():
        probes[name] = tmp_path / name
        os.mknod(probes[name], stat.S_IFCHR | 0o666, os.makedev(major, minor))

    container = _container(cgroup_dir)
    try:
        # the injection, in a subprocess: NVML can be loaded once per process (one driver root each)
        script = (
            "import sys; from cdi.nvml import load_inventory; from cdi.selection import Selection; "
            "from hook.inject import Target, inject, plan_injection; "
            f"inv = load_inventory({str(host)!r}); "
            f"plan = plan_injection({str(host)!r}, inv, Selection(gpus=(inv.gpus[0],)), {{'utility'}}, proc_view=False); "
            f"plan.update_ldcache = False; "
            f"r = inject(plan, Target({str(rootfs)!r}, {container.pid}, cgroup=('v2', {path!r}))); print(r.cgroup, r.nodes)")
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        assert result.returncode == 0, result.stderr
        assert f"('v2', '{path}')" in result.stdout
        assert device_programs_attached(path, hierarchy) == 1   # replaced, not added
        seen = _open_errnos(cgroup_dir, probes.values())
    finally:
        container.stdin.close()
        container.wait(timeout=10)
    by_name = {name: seen[str(p)] for name, p in probes.items()}
    assert by_name["gpu0"] == errno.ENXIO and by_name["ctl"] == errno.ENXIO    # ours: allowed
    assert by_name["gpu1"] == errno.EPERM                                      # not injected: denied
    assert by_name["null"] == 0 and by_name["zero"] == 0                       # the runtime's rules hold
    assert by_name["random"] == errno.EPERM                                    # and its denials too


def test_a_cgroup_without_a_device_program_is_left_alone(cgroup, tmp_path):
    """Nothing to widen: a program of ours would only deny more (every device but the GPUs)."""
    require_root_and("unshare", "gcc")
    from libcontainer_c.device_cgroup import device_programs_attached

    hierarchy, path = cgroup
    host = tmp_path / "host"
    make_simulated_host(host, gpus=1, mig=None)
    (tmp_path / "rootfs/dev").mkdir(parents=True)
    container = _container(hierarchy + path)
    try:
        script = (
            "from cdi.nvml import load_inventory; from cdi.selection import Selection; "
            "from hook.inject import Target, inject, plan_injection; "
            f"inv = load_inventory({str(host)!r}); "
            f"plan = plan_injection({str(host)!r}, inv, Selection(gpus=inv.gpus), {{'utility'}}, proc_view=False); "
            "plan.update_ldcache = False; "
            f"print(inject(plan, Target({str(tmp_path / 'rootfs')!r}, {container.pid}, cgroup=('v2', {path!r}))).cgroup)")
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "None"
        assert device_programs_attached(path, hierarchy) == 0
    finally:
        container.stdin.close()
        container.wait(timeout=10)
