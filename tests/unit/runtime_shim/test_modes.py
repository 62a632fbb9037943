"""The auto rule, hook handling and the atomic config.json rewrite, in-process."""
from __future__ import annotations

import json
import os

import pytest

from cdi.config import Config, parse_config
from cdi.request import resolve_device_request
from runtime_shim import modes
from runtime_shim.bundle_spec import read_spec, write_spec
from runtime_shim.errors import ShimError


class FakeRegistry:
    def __init__(self, names):
        self.devices = {n: object() for n in names}


def request_for(env=(), annotations=None, config=None):
    spec = {"process": {"env": list(env)}}
    if annotations:
        spec["annotations"] = annotations
    return resolve_device_request(spec, config or Config())


def auto(req, names=("nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"), jit=True, monkeypatch=None):
    opened = []

    def factory():
        opened.append(1)
        return FakeRegistry(names)

    if monkeypatch is not None:
        monkeypatch.setattr(modes, "jit_cdi_available", lambda: jit)
    return modes.choose_mode("auto", req, Config(), factory), bool(opened)


def test_generated_capabilities_match_the_generator():
    from cdi.generate import GENERATE_CAPABILITIES

    assert modes.GENERATED_CAPABILITIES == frozenset(GENERATE_CAPABILITIES)


def test_configured_mode_is_used_as_is(monkeypatch):
    req = request_for(["NVIDIA_VISIBLE_DEVICES=0"])
    assert modes.choose_mode("legacy", req, Config(), lambda: pytest.fail("no registry needed")) == "legacy"


@pytest.mark.parametrize("env, annotations, expected, opened", [
    (["NVIDIA_VISIBLE_DEVICES=1"], None, "cdi", True),                       # a spec has it
    (["NVIDIA_VISIBLE_DEVICES=all"], None, "cdi", True),
    (["NVIDIA_VISIBLE_DEVICES=3"], None, "jit-cdi", True),                   # no spec for it
    (["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=3"], None, "cdi", False),       # a CDI name: cdi decides
    ([], {"cdi.k8s.io/x": "vendor.example/c=d"}, "cdi", False),
    (["NVIDIA_VISIBLE_DEVICES=none"], None, "jit-cdi", False),               # driver files only
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compat32,compute"], None, "jit-cdi", False),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=graphics,video"], None, "cdi", True),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"], None, "jit-cdi", False),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "NVIDIA_DISABLE_REQUIRE=true"], None, "cdi", True),
    (["NVIDIA_VISIBLE_DEVICES=0", "CUDA_VERSION=12.1"], None, "jit-cdi", False),  # legacy image: cuda>=12.1
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=0"], None, "legacy", False),
])
def test_auto_rule(monkeypatch, env, annotations, expected, opened):
    assert auto(request_for(env, annotations), monkeypatch=monkeypatch) == (expected, opened)


def test_auto_without_jit_discovery_falls_back_to_legacy(monkeypatch):
    assert auto(request_for(["NVIDIA_VISIBLE_DEVICES=3"]), jit=False, monkeypatch=monkeypatch)[0] == "legacy"


def test_program_names_force_modes():
    assert modes.forced_mode("/usr/bin/nvidia-container-runtime.cdi") == "cdi"
    assert modes.forced_mode("nvidia-container-runtime.legacy") == "legacy"
    assert modes.forced_mode("nvidia-container-runtime") is None


def test_drop_legacy_hooks_keeps_others():
    oci = {"hooks": {"prestart": [{"path": "/x/libnetwork-setkey"}, {"path": "/opt/nvidia-container-runtime-hook"},
                                  {"path": "/usr/bin/env", "args": ["nvidia-container-runtime-hook", "prestart"]}]}}
    assert modes.drop_legacy_hooks(oci)["hooks"]["prestart"] == [{"path": "/x/libnetwork-setkey"}]


def test_legacy_hook_added_after_existing_ones():
    oci = {"hooks": {"prestart": [{"path": "/x/libnetwork-setkey"}]}}
    new = modes.apply_legacy(oci, "/opt/bin/nvidia-container-runtime-hook", {"XDG_CONFIG_HOME": "/cfg"})
    assert new["hooks"]["prestart"][0] == {"path": "/x/libnetwork-setkey"}
    assert new["hooks"]["prestart"][1]["env"][1:] == ["XDG_CONFIG_HOME=/cfg"]
    assert oci["hooks"]["prestart"] == [{"path": "/x/libnetwork-setkey"}]  # the input is not changed


def test_find_hook_prefers_the_shims_own_directory(tmp_path):
    own, other = tmp_path / "own", tmp_path / "other"
    for d in (own, other):
        d.mkdir()
        hook = d / "nvidia-container-runtime-hook"
        hook.write_text("#!/bin/sh\n")
        hook.chmod(0o755)
    found = modes.find_hook(Config(), {"PATH": str(other)}, str(own / "nvidia-container-runtime"))
    assert found == str(own / "nvidia-container-runtime-hook")
    config = parse_config(f'[nvidia-container-runtime-hook]\npath = "{other}/nvidia-container-runtime-hook"\n', "t")
    assert modes.find_hook(config, {}, str(own / "x")) == str(other / "nvidia-container-runtime-hook")


def test_write_spec_is_atomic_and_keeps_mode_owner_and_unknown_fields(tmp_path):
    document = {"ociVersion": "1.0.2", "x-unknown": {"nested": ["\u00e9", 10 ** 20]}, "process": {"env": []}}
    (tmp_path / "config.json").write_text(json.dumps(document))
    os.chmod(tmp_path / "config.json", 0o600)
    os.chown(tmp_path / "config.json", 1234, 4321)
    old_inode = os.stat(tmp_path / "config.json").st_ino
    loaded, raw = read_spec(str(tmp_path))
    loaded["process"]["env"].append("A=1")
    write_spec(str(tmp_path), loaded)
    st = os.stat(tmp_path / "config.json")
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o600, 1234, 4321)
    assert st.st_ino != old_inode  # a new file renamed in, not rewritten in place
    assert json.loads((tmp_path / "config.json").read_text()) == {**document, "process": {"env": ["A=1"]}}
    assert os.listdir(tmp_path) == ["config.json"]


def test_write_spec_failure_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text('{"a": 1}')
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(ShimError, match="cannot write the OCI spec: Input/output error"):
        write_spec(str(tmp_path), {"a": 2})
    assert (tmp_path / "config.json").read_text() == '{"a": 1}'
    assert os.listdir(tmp_path) == ["config.json"]


@pytest.mark.parametrize("text, message", [("[1]", "not a JSON object"), ("{", "not valid JSON")])
def test_read_spec_errors(tmp_path, text, message):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ShimError, match=message):
        read_spec(str(tmp_path))


def test_read_spec_refuses_a_fifo_without_blocking(tmp_path):
    import signal

    os.mkfifo(tmp_path / "config.json")

    def timeout(signum, frame):
        raise TimeoutError("read_spec blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(5)
    try:
        with pytest.raises(ShimError, match="not a regular file"):
            read_spec(str(tmp_path))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


REQUESTS = [
    {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}},
    {"process": {"env": ["CUDA_VERSION=12.1"]}},
    {"process": {"env": ["DOCKER_RESOURCE_GPU=0"]}},
    {"process": {"env": []}, "annotations": {"cdi.k8s.io/a": "nvidia.com/gpu=0"}},
    {"process": {"env": []}, "annotations": {"example.com/cdi-b": "nvidia.com/gpu=1"}},
    {"process": {"env": []}, "mounts": [{"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/0"}]},
]
CONFIG_WITH_EVERY_SOURCE = ('swarm-resource = "DOCKER_RESOURCE_GPU"\naccept-nvidia-visible-devices-as-volume-mounts = true\n'
                            '[nvidia-container-runtime.modes.cdi]\nannotation-prefixes = ["cdi.k8s.io/", "example.com/cdi-"]\n')


@pytest.mark.parametrize("oci", REQUESTS)
def test_every_request_contains_a_marker(oci):
    from runtime_shim.runtime_cache import request_markers

    config = parse_config(CONFIG_WITH_EVERY_SOURCE, "t")
    assert resolve_device_request(oci, config).is_gpu_container
    text = json.dumps(oci)
    assert any(marker in text for marker in request_markers(config))
    # and without the config that enables a source, its marker is not needed
    assert request_markers(Config()) == ["NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION", "cdi.k8s.io/"]


def test_an_empty_annotation_prefix_disables_the_fast_path():
    from runtime_shim.runtime_cache import request_markers

    config = parse_config('[nvidia-container-runtime.modes.cdi]\nannotation-prefixes = [""]\n', "t")
    assert request_markers(config) == []


def test_legacy_hook_gets_the_driver_root_the_shim_was_given():
    new = modes.apply_legacy({}, "/opt/bin/nvidia-container-runtime-hook",
                             {"NVIDIA_CTK_DRIVER_ROOT": "/run/nvidia/driver", "HOME": "/root"})
    env = new["hooks"]["prestart"][0]["env"]
    assert env[0].startswith("PATH=")
    assert env[1:] == ["NVIDIA_CTK_DRIVER_ROOT=/run/nvidia/driver"]


def test_write_spec_replaces_a_symlink_never_its_target(tmp_path):
    """Should config.json become a symlink after it was read, the rename replaces the bundle's entry:
    nothing is written through the link (issue 16.6)."""
    outside = tmp_path / "outside.json"
    outside.write_text('{"a": 1}')
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").symlink_to(outside)
    with pytest.raises(ShimError, match="no longer a regular file"):
        write_spec(str(bundle), {"a": 2})
    assert outside.read_text() == '{"a": 1}'
    assert os.listdir(bundle) == ["config.json"]


def test_read_spec_refuses_a_symlink(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    os.symlink("real.json", tmp_path / "config.json")
    with pytest.raises(ShimError, match="the OCI spec is a symbolic link"):
        read_spec(str(tmp_path))


def test_a_writer_whose_temp_file_was_cleaned_away_takes_another(tmp_path, monkeypatch):
    """A cleaner may lock and remove a temp file in the instant between its create and its writer's lock:
    the writer sees its name gone and starts again with a new one."""
    from runtime_shim import bundle_spec

    real_lockf, names = os.lockf, []

    def cleaned_first(fd, command, length):
        real_lockf(fd, command, length)
        if not names:
            [name] = [n for n in os.listdir(tmp_path) if bundle_spec.is_temp_name(n)]
            names.append(name)
            os.unlink(tmp_path / name)

    monkeypatch.setattr(os, "lockf", cleaned_first)
    fd, path = bundle_spec._create_locked_temp(str(tmp_path))
    os.close(fd)
    assert os.path.basename(path) != names[0]
    assert os.listdir(tmp_path) == [os.path.basename(path)]
