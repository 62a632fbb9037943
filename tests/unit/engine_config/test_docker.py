"""daemon.json: merge keeping the user's keys and indentation; --remove restores the original bytes."""
import json
import os

import pytest

from runtime_shim.engine_config import EngineConfigError, RuntimeRequest, apply_plan, plan_runtime_config
from runtime_shim.engine_config.docker import UNDO_SUFFIX

SHIM = "/opt/gct/bin/nvidia-container-runtime"

# a daemon.json as people keep it: two-space indentation, registry mirrors, another runtime, no final newline
REALISTIC = """{
  "registry-mirrors": ["https://mirror.internal.example"],
  "log-driver": "json-file",
  "log-opts": {
    "max-size": "10m"
  },
  "runtimes": {
    "kata": {
      "path": "/usr/bin/kata-runtime"
    }
  },
  "default-runtime": "runc",
  "features": {
    "buildkit": true
  }
}"""


def configure(path, remove=False, **kw):
    request = RuntimeRequest(runtime_path=SHIM, **kw)
    plan = plan_runtime_config("docker", request, str(path), remove=remove)
    apply_plan(plan)
    return plan


def read(path):
    return path.read_text()


def test_adds_runtime_keeping_other_keys_order_and_indent(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(REALISTIC)
    configure(cfg, set_as_default=True, enable_cdi=True)
    text = read(cfg)
    obj = json.loads(text)
    assert list(obj) == ["registry-mirrors", "log-driver", "log-opts", "runtimes", "default-runtime", "features"]
    assert obj["runtimes"] == {"kata": {"path": "/usr/bin/kata-runtime"}, "nvidia": {"path": SHIM, "args": []}}
    assert obj["default-runtime"] == "nvidia"
    assert obj["features"] == {"buildkit": True, "cdi": True}
    assert obj["log-opts"] == {"max-size": "10m"}
    assert '\n  "log-driver"' in text and '\n    "max-size"' in text  # two spaces kept
    assert not text.endswith("\n")  # the file had no final newline


def test_tab_indentation_is_kept(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text('{\n\t"debug": true\n}\n')
    configure(cfg)
    assert read(cfg).startswith('{\n\t"debug": true,\n\t"runtimes": {\n\t\t"nvidia": {')


def test_second_run_changes_nothing(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(REALISTIC)
    configure(cfg, set_as_default=True)
    written = read(cfg)
    record = (tmp_path / ("daemon.json" + UNDO_SUFFIX)).read_text()
    plan = configure(cfg, set_as_default=True)
    assert plan.pending == []
    assert read(cfg) == written
    assert (tmp_path / ("daemon.json" + UNDO_SUFFIX)).read_text() == record


def test_remove_restores_original_bytes(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(REALISTIC)
    configure(cfg)
    configure(cfg, set_as_default=True, enable_cdi=True)  # a later run with more flags
    assert read(cfg) != REALISTIC
    configure(cfg, remove=True)
    assert read(cfg) == REALISTIC
    assert not (tmp_path / ("daemon.json" + UNDO_SUFFIX)).exists()


def test_missing_file_is_created_and_remove_deletes_it(tmp_path):
    cfg = tmp_path / "docker" / "daemon.json"
    configure(cfg)
    assert json.loads(read(cfg)) == {"runtimes": {"nvidia": {"path": SHIM, "args": []}}}
    assert read(cfg).startswith('{\n    "runtimes"')
    configure(cfg, remove=True)
    assert not cfg.exists()
    assert os.listdir(cfg.parent) == []


def test_empty_file_is_an_empty_config(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text("")
    configure(cfg)
    assert json.loads(read(cfg))["runtimes"]["nvidia"]["path"] == SHIM
    configure(cfg, remove=True)
    assert read(cfg) == ""


def test_remove_after_user_edit_undoes_only_our_keys(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(REALISTIC)
    configure(cfg, set_as_default=True, enable_cdi=True)
    obj = json.loads(read(cfg))
    obj["debug"] = True
    cfg.write_text(json.dumps(obj, indent=2))
    configure(cfg, remove=True)
    after = json.loads(read(cfg))
    assert after["debug"] is True
    assert after["runtimes"] == {"kata": {"path": "/usr/bin/kata-runtime"}}
    assert after["default-runtime"] == "runc"  # the value configure replaced comes back
    assert after["features"] == {"buildkit": True}


def test_remove_leaves_a_key_the_user_changed_since(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(REALISTIC)
    configure(cfg, set_as_default=True)
    obj = json.loads(read(cfg))
    obj["default-runtime"] = "kata"
    cfg.write_text(json.dumps(obj, indent=2))
    plan = configure(cfg, remove=True)
    after = json.loads(read(cfg))
    assert after["default-runtime"] == "kata"
    assert "nvidia" not in after["runtimes"]
    assert any("default-runtime" in note for note in plan.notes)


def test_remove_without_record_takes_out_runtime_and_default_only(tmp_path):
    # a daemon.json configured by NVIDIA's own tool: no undo record next to it
    cfg = tmp_path / "daemon.json"
    cfg.write_text(json.dumps({"default-runtime": "nvidia", "features": {"cdi": True},
                               "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}, indent=4))
    configure(cfg, remove=True)
    assert json.loads(read(cfg)) == {"features": {"cdi": True}}


def test_existing_runtime_entry_keeps_its_args(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(json.dumps({"runtimes": {"nvidia": {"path": "/old/path", "runtimeArgs": ["--debug"]}}}))
    configure(cfg)
    assert json.loads(read(cfg))["runtimes"]["nvidia"] == {"path": SHIM, "runtimeArgs": ["--debug"], "args": []}


@pytest.mark.parametrize("text, message", [
    ('{"debug": true,', "invalid JSON"),
    ("[1, 2]", "top level must be a JSON object"),
    ('{"runtimes": "nvidia"}', "`runtimes` in daemon.json is not a JSON object"),
    ('{"features": [1]}', "`features` in daemon.json is not a JSON object"),
])
def test_broken_config_is_an_error_and_left_untouched(tmp_path, text, message):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(text)
    with pytest.raises(EngineConfigError) as err:
        plan_runtime_config("docker", RuntimeRequest(runtime_path=SHIM, enable_cdi=True), str(cfg))
    assert message in err.value.what
    assert err.value.where == str(cfg)
    assert read(cfg) == text
    assert os.listdir(tmp_path) == ["daemon.json"]


def test_dry_run_plan_is_a_unified_diff(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(REALISTIC)
    plan = plan_runtime_config("docker", RuntimeRequest(runtime_path=SHIM), str(cfg))
    diff = plan.diff()
    assert diff.startswith(f"--- {cfg}\n+++ {cfg}\n@@ ")
    assert f'+      "path": "{SHIM}",' in diff
    assert "undo record" in diff
    assert read(cfg) == REALISTIC


def test_undo_record_is_private(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text('{"registry-mirrors": []}')
    cfg.chmod(0o640)
    configure(cfg)
    assert cfg.stat().st_mode & 0o777 == 0o640  # the config keeps its mode
    assert (tmp_path / ("daemon.json" + UNDO_SUFFIX)).stat().st_mode & 0o777 == 0o600


def test_untouched_lines_keep_their_bytes(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(REALISTIC)
    configure(cfg, set_as_default=True, enable_cdi=True)
    new = read(cfg).splitlines()
    assert '  "registry-mirrors": ["https://mirror.internal.example"],' in new  # not reflowed
    assert '      "path": "/usr/bin/kata-runtime"' in new
    assert '  "default-runtime": "nvidia",' in new
    assert '  "features": {' in new and '    "buildkit": true,' in new and '    "cdi": true' in new
    changed = [line for line in REALISTIC.splitlines() if line not in new]
    assert changed == ['  "default-runtime": "runc",', '    "buildkit": true']
