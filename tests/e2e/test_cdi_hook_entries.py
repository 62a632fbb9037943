"""nvidia-cdi-hook entries under real runc and crun, where each runtime runs them: a createRuntime entry
(ours: the hook joins the init's mount namespace) and a createContainer entry (NVIDIA's: the hook is
already in the container's), in a container with and without a pid namespace of its own (a host-pid
pod). Without one, runc's createContainer state names the container's init by its host pid, in the
hook's own mount namespace: the hook's parent, which the hook must take as the container's (any other
process there is refused).

The hook makes a link on a tmpfs that config.json mounts in the container: only the hook that worked
in the container's mount namespace puts it where the container sees it."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.e2e.bundle import make_bundle, userns_work_dir, with_user_namespace
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.hook_support import mount_table, require_root_and, run_with_runtime
from tests.unit.cdi_hook.test_cdi_hook import HOOK

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("runtime", ["runc", "crun"])
@pytest.mark.parametrize("entry", ["createRuntime", "createContainer"])
@pytest.mark.parametrize("pid_namespace", [True, False], ids=["own-pid-ns", "host-pid"])
@pytest.mark.parametrize("user_namespace", [False, True], ids=["", "userns"])
def test_the_hook_works_in_the_containers_mount_namespace(runtime, entry, pid_namespace,
                                                          user_namespace):
    require_root_and(runtime)
    if not HOOK.exists():
        pytest.skip("nvidia-cdi-hook launcher not installed (run `make venv`)")
    if user_namespace and not pid_namespace:
        pytest.skip("the kernel lets a user namespace mount /proc only in a pid namespace it owns")
    ensure_hugetlb_on_v1()
    with userns_work_dir() as tmp_path:
        run_one(tmp_path, runtime, entry, pid_namespace, user_namespace)


def run_one(tmp_path, runtime, entry, pid_namespace, user_namespace):
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", "readlink /opt/volume/libgct.so.1"])
    (bundle / "rootfs/opt/volume").mkdir(parents=True)
    if user_namespace:
        with_user_namespace(bundle)
    config = json.loads((bundle / "config.json").read_text())
    config["mounts"].append({"destination": "/opt/volume", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]})
    if not pid_namespace:
        config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] != "pid"]
    hook = HOOK
    if user_namespace:
        # runc and crun run a createContainer hook from the container's init, as the container's root:
        # an unprivileged host uid, which cannot reach a checkout in a closed directory (root's home).
        # The hook is one static program: a copy in the work dir (0755) is the same hook.
        hook = tmp_path / "nvidia-cdi-hook"
        shutil.copy2(HOOK, hook)
    config["hooks"] = {entry: [{"path": str(hook), "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
                                "args": ["nvidia-cdi-hook", "create-symlinks", "--link",
                                         "libgct.so.550.54.15::/opt/volume/libgct.so.1"]}]}
    (bundle / "config.json").write_text(json.dumps(config))
    before = mount_table(str(tmp_path))
    result = run_with_runtime(runtime, bundle, tmp_path / "state")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "libgct.so.550.54.15\n"        # the link is on the container's tmpfs
    assert list((bundle / "rootfs/opt/volume").iterdir()) == []   # and not under it, in the rootfs
    assert mount_table(str(tmp_path)) == before
