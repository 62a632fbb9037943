"""Our nvidia-device-plugin against NVIDIA's own (k8s-device-plugin, built by `make kube`:
tests/support/kube/nvidia_plugin_build.py), one after the other on one real kubelet, on the same simulated
host with the same config: the kubelet must offer the same resources with the same device ids (its
pod-resources GetAllocatableResources). Cases: MIG strategy none (a host with one GPU in MIG mode: a
whole GPU to both), single (every GPU in MIG mode with one profile), mixed (MIG devices of two profiles
beside a whole GPU, one with the media engines: `1g.5gb+me`), mixed with a compute instance smaller than
its GPU instance (`1c.3g.20gb`), time-slicing with replicas, with renameByDefault, and of MIG devices;
and single on a mixed host, refused by both. The deliberate differences (the resource of a `+me` MIG
device and of a `1c.3g.20gb` one: NVIDIA's v0.18.0 matches profiles unanchored) are applied to NVIDIA's
offer before comparing (with_the_me_fix).

NVIDIA's plugin runs under `nvidia-ctk simulate exec HOST` (the simulated /dev, /proc/driver and
/sys/bus/pci) with --nvidia-driver-root HOST, so go-nvml dlopens the simulated host's libnvidia-ml.so.1;
ours takes the same driver root. Before each plugin the kubelet is restarted without its device-plugin
checkpoint, so a resource only the previous plugin offered cannot linger in what is compared.

MPS (replicas, renameByDefault): NVIDIA's plugin asks its control daemon at /mps/<resource>/pipe, a
fixed path (its container's mount of --mps-root), so it runs in a root of its own where /mps is
(tests/support/kube/nvidia_mps_root.py: an overlay of / on a tmpfs, the daemon started there); ours runs
its own daemons under its --mps-root and needs --cdi-root."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.kube import paths
from tests.support.kube.fixtures import skip_reason_for_node, skip_reason_for_nvidia_plugin
from tests.support.kube.node import kube_node as start_kube_node
from tests.support.simulated_host import NVIDIA_CTK, create_in_process, inventory_from_marker

pytestmark = pytest.mark.e2e

OURS = Path(sys.executable).parent / "nvidia-device-plugin"
CHECKOUT = Path(__file__).resolve().parents[3]  # where `python -m tests.support...` finds its module
CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
SETTLE = 2.0  # seconds the offer must stay the same once it is there

HOSTS = {
    "plain": dict(gpus=2, mig_options=()),
    "one-mig": dict(gpus=2, mig_options=("1=1g.5gb,1g.5gb",)),
    "uniform-mig": dict(gpus=2, mig_options=("0=3g.20gb,3g.20gb", "1=3g.20gb,3g.20gb")),
    "mixed-mig": dict(gpus=2, mig_options=("1=3g.20gb,1g.5gb,1g.5gb+me",)),
    # a compute instance of 1 slice in a 3g GPU instance (1c.3g.20gb) beside a whole one
    "small-ci-mig": dict(gpus=2, mig_options=("1=1c.3g.20gb,3g.20gb",)),
}

TIME_SLICING = "version: v1\nsharing:\n  timeSlicing:\n{}    resources:\n{}"
MPS = "version: v1\nsharing:\n  mps:\n{}    resources:\n    - {{name: nvidia.com/gpu, replicas: {}}}\n"

# case -> (host, config file text)
CASES = {
    "mig-none": ("one-mig", "version: v1\nflags:\n  migStrategy: none\n"),
    "mig-single": ("uniform-mig", "version: v1\nflags:\n  migStrategy: single\n"),
    "mig-mixed": ("mixed-mig", "version: v1\nflags:\n  migStrategy: mixed\n"),
    "mig-mixed-small-ci": ("small-ci-mig", "version: v1\nflags:\n  migStrategy: mixed\n"),
    "time-slicing": ("plain", TIME_SLICING.format("", "    - {name: nvidia.com/gpu, replicas: 3}\n")),
    "time-slicing-renamed": ("plain", TIME_SLICING.format("    renameByDefault: true\n",
                                                          "    - {name: nvidia.com/gpu, replicas: 2}\n")),
    "time-slicing-mig": ("mixed-mig", "version: v1\nflags:\n  migStrategy: mixed\n" + TIME_SLICING.format(
        "", "    - {name: nvidia.com/mig-1g.5gb, replicas: 2}\n    - {name: nvidia.com/gpu, replicas: 2}\n")
        .removeprefix("version: v1\n")),
    "mps": ("plain", MPS.format("", 3)),
    "mps-renamed": ("plain", MPS.format("    renameByDefault: true\n", 2)),
}


def _nvidia_plugin() -> Path:
    reason = skip_reason_for_nvidia_plugin()
    if reason:
        pytest.skip(reason)
    return paths.nvidia_plugin_bin_dir() / "nvidia-device-plugin"


@pytest.fixture(scope="module")
def node():
    reason = skip_reason_for_node("1.7", control_plane=False)
    if reason:
        pytest.skip(reason)
    _nvidia_plugin()
    with start_kube_node(paths.kube_bin_dir()) as started:
        yield started


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    made = {}

    def host(name: str) -> Path:
        if name not in made:
            made[name] = tmp_path_factory.mktemp(f"parity-{name}") / "host"
            create_in_process(made[name], **HOSTS[name])
        return made[name]
    return host


def offer(node, command: list[str], log: Path, timeout: float = 40) -> dict[str, list[str]]:
    """What the kubelet, freshly restarted without its checkpoint, offers once command (a device plugin)
    has registered and the offer has stayed the same for SETTLE seconds; the plugin is stopped after."""
    node.stop_kubelet()
    node.path(CHECKPOINT).unlink(missing_ok=True)
    node.start_kubelet()
    with open(log, "w") as out:
        plugin = node.popen(command, stdout=out, stderr=out, cwd=CHECKOUT)
        try:
            seen, since, deadline = {}, time.monotonic(), time.monotonic() + timeout
            while time.monotonic() < deadline and not (seen and time.monotonic() - since >= SETTLE):
                assert plugin.poll() is None, f"{command[0]} ended ({plugin.returncode}):\n{log.read_text()}"
                try:
                    now = {r: sorted(ids) for r, ids in node.allocatable_devices().items() if ids}
                except Exception:  # the kubelet's pod-resources socket is not there yet
                    now = {}
                if now != seen:
                    seen, since = now, time.monotonic()
                time.sleep(0.3)
            assert seen, f"nothing offered in {timeout} s:\n{log.read_text()[-3000:]}"
        finally:
            plugin.send_signal(signal.SIGTERM)
            try:
                plugin.wait(timeout=30)
            except subprocess.TimeoutExpired:
                plugin.kill()
                plugin.wait()
    return seen


@pytest.mark.parametrize("case", list(CASES))
def test_the_kubelet_offers_what_nvidias_plugin_gives_it(node, hosts, case, tmp_path):
    host_name, config_text = CASES[case]
    host = hosts(host_name)
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    common = ["--nvidia-driver-root", str(host), "--config-file", str(config)]
    nvidias, ours_only = [str(_nvidia_plugin())], []
    if case.startswith("mps"):
        # NVIDIA's wants its MPS daemon under /mps (tests/support/kube/nvidia_mps_root.py); ours runs its
        # own daemons and writes the shares' CDI spec
        resource = "nvidia.com/gpu.shared" if "renamed" in case else "nvidia.com/gpu"
        nvidias = [sys.executable, "-m", "tests.support.kube.nvidia_mps_root", resource, "--", *nvidias]
        common += ["--mps-root", str(tmp_path / "mps")]
        ours_only = ["--cdi-root", str(tmp_path / "cdi")]
    theirs = offer(node, [str(NVIDIA_CTK), "simulate", "exec", str(host), "--", *nvidias, *common],
                   tmp_path / "nvidia.log")
    ours = offer(node, [str(OURS), *common, *ours_only], tmp_path / "ours.log")
    print(f"{case}: NVIDIA's {_counts(theirs)}; ours {_counts(ours)}")
    assert ours == with_the_me_fix(theirs, host)


def with_the_me_fix(offered: dict[str, list[str]], host: Path) -> dict[str, list[str]]:
    """NVIDIA's offer with each MIG device under its own profile's resource, the deliberate differences
    (docs/device-plugin.md, "MIG profiles with attributes" and "A compute instance smaller than its GPU
    instance"): v0.18.0 matches a resource's profile as an unanchored regular expression, so a 1g.5gb+me
    device is counted (and time-sliced) in nvidia.com/mig-1g.5gb, and a 1c.3g.20gb device (for which it
    makes no resource of its own) in nvidia.com/mig-3g.20gb; ours offers them as nvidia.com/mig-1g.5gb.me
    and nvidia.com/mig-1c.3g.20gb (no case here shares those)."""
    own = {m.uuid: f"nvidia.com/mig-{m.profile.replace('+', '.')}"
           for gpu in inventory_from_marker(host).gpus for m in gpu.mig_devices}
    fixed: dict[str, set[str]] = {}
    for resource, ids in offered.items():
        for device in ids:
            uuid = device.split("::")[0]
            if resource.startswith("nvidia.com/mig-") and uuid in own and own[uuid] != resource:
                fixed.setdefault(own[uuid], set()).add(uuid)
            else:
                fixed.setdefault(resource, set()).add(device)
    return {resource: sorted(ids) for resource, ids in fixed.items()}


def test_both_refuse_single_on_a_mixed_host(node, hosts, tmp_path):
    """mig-strategy single with a GPU in and one out of MIG mode: both plugins end with an error and
    register nothing (NVIDIA's: failOnInitError is true by default)."""
    host = hosts("mixed-mig")
    common = ["--nvidia-driver-root", str(host), "--mig-strategy", "single"]
    for name, command in (("nvidia", [str(NVIDIA_CTK), "simulate", "exec", str(host), "--", str(_nvidia_plugin())]),
                          ("ours", [str(OURS)])):
        log = tmp_path / f"{name}.log"
        with open(log, "w") as out:
            plugin = node.popen([*command, *common], stdout=out, stderr=out)
            try:
                status = plugin.wait(timeout=30)
            finally:
                if plugin.poll() is None:
                    plugin.kill()
                    plugin.wait()
        assert status != 0, log.read_text()
        assert not list(node.path("/var/lib/kubelet/device-plugins").glob("nvidia-*.sock")), log.read_text()


def _counts(offered: dict[str, list[str]]) -> str:
    return ", ".join(f"{resource} {len(ids)}" for resource, ids in sorted(offered.items()))
