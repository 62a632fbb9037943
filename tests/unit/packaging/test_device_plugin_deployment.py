"""The device plugin's deployment files: the systemd unit and its config file (packaging/systemd,
packaging/device-plugin), the DaemonSet, ConfigMap and RuntimeClass of packaging/kubernetes/ and the
Dockerfile of its image. The image itself is not built here (its base image comes from a registry this
machine cannot reach); what can be checked without it is: the manifests parse, their kinds and
apiVersions are the API's, every mount names a volume, the container's command is the installed
program's real flags (parsed by its own parser and named in its --help), and the ConfigMap's config and
the packaged one load with the plugin's config loader. tests/e2e/kube/test_deployment_manifests.py has
a real API server check them (server-side dry run, strict field validation)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from device_plugin.config import load_file, resolve
from device_plugin.main import parse_args

REPO = Path(__file__).resolve().parents[3]
KUBERNETES = REPO / "packaging" / "kubernetes"
PROGRAM = Path(sys.executable).parent / "nvidia-device-plugin"
# kind -> the apiVersion the API serves it under (Kubernetes >= 1.20)
API_VERSIONS = {"ConfigMap": "v1", "DaemonSet": "apps/v1", "RuntimeClass": "node.k8s.io/v1"}


def documents() -> list[dict]:
    docs = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def one(kind: str) -> dict:
    [doc] = [d for d in documents() if d["kind"] == kind]
    return doc


def container() -> dict:
    [ctr] = one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    return ctr


def help_text() -> str:
    done = subprocess.run([str(PROGRAM), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    return done.stdout


def test_every_manifest_parses_and_has_a_kind_the_api_serves():
    docs = documents()
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "DaemonSet", "RuntimeClass"]
    for doc in docs:
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]], doc["kind"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])


def test_the_runtime_class_is_the_runtime_nvidia_ctk_configures():
    runtime_class = one("RuntimeClass")
    assert (runtime_class["metadata"]["name"], runtime_class["handler"]) == ("nvidia", "nvidia")
    done = subprocess.run([str(PROGRAM.parent / "nvidia-ctk"), "runtime", "configure", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert "[default: nvidia]" in done.stdout   # --nvidia-runtime-name: the handler's name


def test_the_daemonset_as_nvidia_deploys_it():
    daemonset = one("DaemonSet")
    spec = daemonset["spec"]
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["priorityClassName"] == "system-node-critical"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container()["volumeMounts"]}
    assert set(mounts.values()) <= set(volumes), "every mount names a volume"
    host_paths = {v["hostPath"]["path"]: name for name, v in volumes.items() if "hostPath" in v}
    assert mounts["/var/lib/kubelet/device-plugins"] == host_paths["/var/lib/kubelet/device-plugins"]
    assert mounts["/driver-root"] == host_paths["/"] and mounts["/var/run/cdi"] == host_paths["/var/run/cdi"]
    assert {m["mountPath"] for m in container()["volumeMounts"] if m.get("readOnly")} == {
        "/driver-root", "/etc/nvidia-device-plugin"}   # the spec's folder and the sockets' are written
    assert volumes[mounts["/etc/nvidia-device-plugin"]]["configMap"]["name"] == one("ConfigMap")["metadata"]["name"]
    assert daemonset["metadata"]["namespace"] == one("ConfigMap")["metadata"]["namespace"]


def test_the_container_command_is_the_programs_real_flags_and_its_config_loads(tmp_path):
    command = container()["command"]
    assert command[0] == "nvidia-device-plugin"
    flags = [arg.split("=", 1)[0] for arg in command[1:]]
    text = help_text()
    for flag in flags:
        assert re.search(rf"(^|\s){re.escape(flag)}[\s=]", text, re.M), flag
    _, given = parse_args(command[1:])   # the program's own parser: unknown flags or values fail here
    # the config file the command names is the ConfigMap's key, mounted at that folder
    config_path = Path(given["config_file"])
    data = one("ConfigMap")["data"]
    assert config_path.parent == Path("/etc/nvidia-device-plugin") and config_path.name in data
    local = tmp_path / config_path.name
    local.write_text(data[config_path.name])
    config = resolve({**given, "config_file": str(local)}, environ={})
    assert (config.mig_strategy, config.fail_on_init_error, config.device_list_strategy) == ("none", False, ["cdi-cri"])
    # the node's / is read at /driver-root (the DaemonSet's mount); passDeviceSpecs and the spec name the node's paths
    assert (config.nvidia_driver_root, config.container_driver_root, config.local_driver_root, config.device_root) \
        == ("/", "/driver-root", "/driver-root", "/")
    # the spec goes to the node's CDI folder (the DaemonSet's mount of it), its hook is the packages'
    assert config.cdi_root == "/var/run/cdi" and config.cdi_root in {m["mountPath"] for m in container()["volumeMounts"]}
    from launcher import install_launchers

    assert config.nvidia_ctk_path == "/usr/bin/nvidia-cdi-hook" and "nvidia-cdi-hook" in install_launchers.PROGRAMS
    # the labels go to the folder mounted from the node's NFD features.d
    assert Path(config.gfd_output_file).parent.as_posix() in {m["mountPath"] for m in container()["volumeMounts"]}


def test_the_daemonsets_config_writes_a_spec_of_the_nodes_paths(tmp_path):
    """The ConfigMap's config and the container's command, run against a simulated host standing for the
    node's / mounted at /driver-root: the spec written into the CDI folder names the node's paths (which
    containerd opens on the node) and every device the plugin hands out under cdi-cri."""
    from cdi.spec import Spec
    from cdi.spec_file import parse_spec_text
    from device_plugin.allocate import cdi_name
    from device_plugin.cdi_spec import refresh_spec
    from device_plugin.resources import build_resources
    from tests.support.simulated_host import create_in_process, inventory_from_marker

    node = tmp_path / "node"
    create_in_process(node, gpus=2, mig_options=())
    (tmp_path / "config.yaml").write_text(one("ConfigMap")["data"]["config.yaml"])
    args = [a for a in container()["command"][1:] if not a.startswith(("--config-file", "--container-driver-root",
                                                                       "--cdi-root"))]
    _, given = parse_args([*args, f"--config-file={tmp_path / 'config.yaml'}", f"--container-driver-root={node}",
                           f"--cdi-root={tmp_path / 'cdi'}"])
    config = resolve(given, environ={})
    inventory = inventory_from_marker(node)
    resources = build_resources(inventory, config.mig_strategy)
    path = refresh_spec(config, inventory, resources)
    spec = Spec.from_dict(parse_spec_text(Path(path).read_text(), path))
    text = Path(path).read_text()
    assert str(node) not in text and "hostPath: /dev/nvidia0" in text and "path: /usr/bin/nvidia-cdi-hook" in text
    names = {f"{spec.kind}={d.name}" for d in spec.devices}
    assert {cdi_name(d.device_id(config.device_id_strategy)) for r in resources for d in r.devices} <= names


def test_the_dockerfile_installs_the_wheel_and_runs_the_program():
    text = (KUBERNETES / "Dockerfile").read_text()
    instructions = [line.split()[0] for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert set(instructions) <= {"FROM", "RUN", "COPY", "ENV", "ENTRYPOINT"}, instructions
    assert 'ENTRYPOINT ["nvidia-device-plugin"]' in text
    # the command of the DaemonSet starts the program the image has on its PATH
    assert "ENV PATH=/opt/gpu-container-toolkit/bin:" in text and container()["command"][0] == "nvidia-device-plugin"
    # the context leaves the checkout's own venv and build output out
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".git", "build"} <= set(ignored)


def test_the_systemd_unit_runs_the_program_with_the_packaged_config():
    sys.path.insert(0, str(REPO / "packaging"))
    try:
        from pkgtools.layout import DEB, DEVICE_PLUGIN_CONFIG, DEVICE_PLUGIN_UNIT, UNITS, render, substitutions
    finally:
        sys.path.pop(0)
    unit = render(REPO / "packaging" / "systemd" / DEVICE_PLUGIN_UNIT, substitutions(DEB))
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    program, *args = exec_start.removeprefix("ExecStart=").split()
    assert program.endswith("/bin/nvidia-device-plugin") and args == [f"--config-file={DEVICE_PLUGIN_CONFIG}"]
    parse_args(args)
    # every program it runs is the package's (systemd-analyze verify in tests/e2e/test_packages.py)
    assert [line for line in unit.splitlines() if line.startswith("Exec")] == [exec_start]
    assert DEVICE_PLUGIN_UNIT not in UNITS   # the package never enables it
    preset = (REPO / "packaging" / "systemd" / "50-gpu-container-toolkit.preset").read_text()
    assert DEVICE_PLUGIN_UNIT not in preset
    config = load_file(str(REPO / "packaging" / "device-plugin" / "config.yaml"))
    assert config == {"mig_strategy": "none", "fail_on_init_error": True, "nvidia_driver_root": "/",
                      "pass_device_specs": False, "device_list_strategy": ["envvar"], "device_id_strategy": "uuid",
                      "cdi_annotation_prefix": "cdi.k8s.io/"}   # every value the plugin's default


@pytest.mark.parametrize("script", ["debian/prerm", "rpm/gpu-container-toolkit.spec.in"])
def test_removing_the_package_stops_the_plugins_unit(script):
    text = (REPO / "packaging" / script).read_text()
    assert re.search(r"(stop|disable --now) @UNITS@ @DEVICE_PLUGIN_UNIT@", text), script


def test_every_installation_gets_the_program():
    """install_launchers installs it (make venv, the .deb/.rpm's environment, the wheel's scripts) and
    venv_build keeps it (tests/e2e/test_packages.py finds it in /usr/bin of both packages)."""
    from launcher import install_launchers

    sys.path.insert(0, str(REPO / "packaging"))
    try:
        from pkgtools import venv_build
    finally:
        sys.path.pop(0)
    assert install_launchers.PROGRAMS["nvidia-device-plugin"] == "device_plugin.main"
    assert "nvidia-device-plugin" not in venv_build.TEST_ONLY_PROGRAMS
    assert PROGRAM.is_file()
