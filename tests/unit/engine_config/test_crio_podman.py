"""CRI-O drop-in and podman hooks.d file (no CRI-O on these machines: unit tests only)."""
import json

import pytest
import tomlkit

from runtime_shim.engine_config import EngineConfigError, RuntimeRequest, apply_plan, plan_runtime_config

SHIM = "/opt/gct/bin/nvidia-container-runtime"
HOOK = "/opt/gct/bin/nvidia-container-runtime-hook"

CRIO_CONF = """# CRI-O main config
[crio.runtime]
default_runtime = "crun"

[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
runtime_root = "/run/crun"
monitor_path = "/usr/libexec/crio/conmon"
allowed_annotations = ["io.containers.trace-syscall"]

[crio.runtime.runtimes.runc]
runtime_path = "/usr/bin/runc"
"""


def run(engine, cfg, remove=False, **kw):
    request = RuntimeRequest(runtime_path=SHIM, hook_path=HOOK, **kw)
    plan = plan_runtime_config(engine, request, str(cfg), remove=remove)
    apply_plan(plan)
    return plan


def crio_drop_in(tmp_path):
    return tmp_path / "crio.conf.d" / "99-nvidia.toml"


def test_crio_copies_the_default_runtime(tmp_path):
    cfg = tmp_path / "crio.conf"
    cfg.write_text(CRIO_CONF)
    run("crio", cfg, set_as_default=True)
    drop = tomlkit.parse(crio_drop_in(tmp_path).read_text()).unwrap()
    assert drop == {"crio": {"runtime": {"default_runtime": "nvidia", "runtimes": {"nvidia": {
        "runtime_path": SHIM, "runtime_root": "/run/crun", "monitor_path": "/usr/libexec/crio/conmon",
        "allowed_annotations": ["io.containers.trace-syscall"]}}}}}
    assert cfg.read_text() == CRIO_CONF  # the main config is only read


def test_crio_without_main_config(tmp_path):
    run("crio", tmp_path / "crio.conf")
    drop = tomlkit.parse(crio_drop_in(tmp_path).read_text()).unwrap()
    assert drop == {"crio": {"runtime": {"runtimes": {"nvidia": {"runtime_type": "oci", "runtime_path": SHIM}}}}}


def test_crio_idempotent_two_names_and_remove(tmp_path):
    cfg = tmp_path / "crio.conf"
    cfg.write_text(CRIO_CONF)
    run("crio", cfg)
    first = crio_drop_in(tmp_path).read_text()
    assert run("crio", cfg).pending == []
    run("crio", cfg, name="nvidia-cdi", set_as_default=True)
    run("crio", cfg, remove=True, name="nvidia-cdi")
    assert crio_drop_in(tmp_path).read_text() == first
    run("crio", cfg, remove=True)
    assert not crio_drop_in(tmp_path).exists()


def test_crio_cdi_flag_is_a_note(tmp_path):
    plan = run("crio", tmp_path / "crio.conf", enable_cdi=True)
    assert any("CDI" in note for note in plan.notes)
    assert "cdi" not in crio_drop_in(tmp_path).read_text()


def test_crio_foreign_drop_in_and_broken_main(tmp_path):
    cfg = tmp_path / "crio.conf"
    cfg.write_text("[crio.runtime\n")
    with pytest.raises(EngineConfigError, match="invalid TOML"):
        run("crio", cfg)
    cfg.write_text(CRIO_CONF)
    crio_drop_in(tmp_path).parent.mkdir()
    crio_drop_in(tmp_path).write_text("[crio.runtime]\n")
    with pytest.raises(EngineConfigError, match="not written by nvidia-ctk"):
        run("crio", cfg)
    assert crio_drop_in(tmp_path).read_text() == "[crio.runtime]\n"


def test_podman_hook_file(tmp_path):
    hook_file = tmp_path / "hooks.d" / "oci-nvidia-hook.json"
    plan = run("podman", hook_file)
    assert plan.restart is None
    doc = json.loads(hook_file.read_text())
    assert doc["version"] == "1.0.0"
    assert doc["hook"]["path"] == HOOK
    assert doc["hook"]["args"] == ["nvidia-container-runtime-hook", "prestart"]
    assert doc["hook"]["env"] and all("=" in e for e in doc["hook"]["env"])  # never an empty env
    assert doc["stages"] == ["prestart"] and doc["when"] == {"always": True}
    assert run("podman", hook_file).pending == []
    run("podman", hook_file, remove=True)
    assert not hook_file.exists()


def test_podman_same_hook_formatted_differently_is_left_alone(tmp_path):
    hook_file = tmp_path / "oci-nvidia-hook.json"
    run("podman", hook_file)
    compact = json.dumps(json.loads(hook_file.read_text()))
    hook_file.write_text(compact)
    assert run("podman", hook_file).pending == []
    assert hook_file.read_text() == compact


def test_podman_foreign_or_broken_hook_is_left_alone(tmp_path):
    hook_file = tmp_path / "oci-nvidia-hook.json"
    foreign = json.dumps({"version": "1.0.0", "hook": {"path": "/usr/bin/other-hook"}})
    hook_file.write_text(foreign)
    for remove in (False, True):
        with pytest.raises(EngineConfigError, match="not an nvidia-container-runtime-hook hook"):
            run("podman", hook_file, remove=remove)
    hook_file.write_text("{")
    with pytest.raises(EngineConfigError, match="invalid JSON"):
        run("podman", hook_file)
    assert hook_file.read_text() == "{"


def test_podman_relative_hook_path_is_refused(tmp_path):
    with pytest.raises(EngineConfigError, match="must be absolute"):
        plan_runtime_config("podman", RuntimeRequest(hook_path="nvidia-container-runtime-hook"),
                            str(tmp_path / "h.json"))


def test_podman_hook_installed_under_another_name_is_still_ours(tmp_path):
    hook_file = tmp_path / "oci-nvidia-hook.json"
    plan_request = RuntimeRequest(hook_path="/opt/site/gpu-hook")
    apply_plan(plan_runtime_config("podman", plan_request, str(hook_file)))
    apply_plan(plan_runtime_config("podman", plan_request, str(hook_file), remove=True))
    assert not hook_file.exists()
