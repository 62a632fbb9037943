"""The shim's create path through the real launcher, with a fake low-level runtime that records the
config.json it was handed: untouched without a GPU request, CDI edits in cdi mode, the prestart hook
in legacy mode, errors in one line and in runc's log format."""
from __future__ import annotations

import json
import os

import pytest

from tests.unit.runtime_shim.shim_env import (  # noqa: F401  (bindir: a module fixture)
    DOCKER_HOOK, KIND, bindir, make_bundle, make_cdi_shim_env, minimal_spec)


@pytest.fixture
def shim(tmp_path, bindir):
    return make_cdi_shim_env(tmp_path, bindir)


def create(shim, bundle, *extra, program="nvidia-container-runtime", env=None):
    return shim.run("--root", str(shim.root / "state"), "--log", str(bundle / "log.json"), "--log-format", "json",
                    "create", "--bundle", str(bundle), *extra, "ctr", program=program, env=env)


def handed_over(shim) -> dict:
    [call] = shim.calls()
    return json.loads(call["spec"])


def test_no_gpu_request_leaves_config_json_byte_for_byte(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=void"]))
    before = (bundle / "config.json").read_bytes()
    st = os.stat(bundle / "config.json")
    result = create(shim, bundle)
    assert result.returncode == 0, result.stderr
    assert (bundle / "config.json").read_bytes() == before
    assert os.stat(bundle / "config.json").st_ino == st.st_ino
    assert shim.calls()[0]["argv"][1:] == ["--root", str(shim.root / "state"), "--log", str(bundle / "log.json"),
                                           "--log-format", "json", "create", "--bundle", str(bundle), "ctr"]


def test_cdi_mode_applies_the_spec_and_keeps_unknown_fields_and_mode(shim, tmp_path):
    spec = minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"], **{"x-vendor-field": {"keep": [1, 2.5, None]}})
    spec["hooks"] = {"prestart": [DOCKER_HOOK], "poststop": [{"path": "/bin/true"}]}
    bundle = make_bundle(tmp_path / "b", spec, mode=0o640)
    result = create(shim, bundle)
    assert result.returncode == 0, result.stderr
    new = handed_over(shim)
    assert new == json.loads((bundle / "config.json").read_text())
    assert new["x-vendor-field"] == {"keep": [1, 2.5, None]}
    assert new["process"]["env"] == ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"]
    assert [d["path"] for d in new["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia1"]
    assert new["linux"]["devices"][1]["major"] == os.major(os.stat("/dev/zero").st_rdev)
    assert {"destination": "/usr/lib/libfake.so", "source": str(shim.root / "libfake.so"),
            "options": ["ro", "nosuid", "nodev", "bind", "rprivate"]} in new["mounts"]
    assert "prestart" not in new["hooks"] and new["hooks"]["poststop"] == [{"path": "/bin/true"}]
    assert os.stat(bundle / "config.json").st_mode & 0o777 == 0o640
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]


def test_cdi_mode_unknown_device_fails_with_nothing_changed(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=7"]))
    before = (bundle / "config.json").read_bytes()
    result = create(shim, bundle)
    assert result.returncode == 1
    assert result.stderr == (f"nvidia-container-runtime: error: unresolvable CDI device {KIND}=7: no such device in the specs "
                             "(nvidia-ctk cdi list shows them; regenerate after a GPU change) "
                             f"(spec dirs {shim.spec_dir})\n")
    assert (bundle / "config.json").read_bytes() == before
    assert not shim.calls()
    [line] = (bundle / "log.json").read_text().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "error" and entry["msg"] == result.stderr.strip()
    assert set(entry) == {"level", "msg", "time"}


def test_a_device_defined_in_two_spec_files_names_both(shim, tmp_path):
    # a second file in the same dir defining the same devices: neither counts, and the line says which two
    (shim.spec_dir / "other.json").write_bytes((shim.spec_dir / "nvidia.json").read_bytes())
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"]))
    result = create(shim, bundle)
    assert result.returncode == 1
    assert result.stderr == (f"nvidia-container-runtime: error: CDI device {KIND}=1 is defined in both "
                             f"{shim.spec_dir}/nvidia.json and {shim.spec_dir}/other.json; remove one of them "
                             f"(spec dirs {shim.spec_dir})\n")
    assert not shim.calls()


def test_text_log_format_is_runcs(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=7"]))
    result = shim.run("--log", str(tmp_path / "runc.log"), "create", "-b", str(bundle), "ctr")
    assert result.returncode == 1
    line = (tmp_path / "runc.log").read_text()
    assert line.startswith('time="') and ' level=error msg="nvidia-container-runtime: error: unresolvable' in line


def test_malformed_request_is_one_line(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=../../etc"]))
    result = create(shim, bundle)
    assert result.returncode == 1
    assert result.stderr.startswith("nvidia-container-runtime: error: malformed device id '../../etc'")
    assert result.stderr.count("\n") == 1


def test_annotation_request(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(annotations={"cdi.k8s.io/gpus": f"{KIND}=GPU-abc"}))
    assert create(shim, bundle).returncode == 0
    assert [d["path"] for d in handed_over(shim)["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia1"]


def test_none_gets_the_common_edits_only(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=none"]))
    assert create(shim, bundle).returncode == 0
    assert [d["path"] for d in handed_over(shim)["linux"]["devices"]] == ["/dev/nvidiactl"]


def test_bundle_defaults_to_the_current_directory(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    result = shim.run("create", "ctr", cwd=bundle)
    assert result.returncode == 0, result.stderr
    assert "/dev/nvidia0" in (bundle / "config.json").read_text()


def test_run_is_modified_like_create(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    assert shim.run("run", "-d", "--bundle", str(bundle), "ctr").returncode == 0
    assert "/dev/nvidia0" in (bundle / "config.json").read_text()


def test_create_that_runc_would_refuse_is_passed_on_untouched(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    before = (bundle / "config.json").read_bytes()
    result = shim.run("create", "--no-pivot", "ctr", "--bundle", str(bundle))  # urfave: "ctr" is a value
    assert result.returncode == 0, result.stderr
    assert (bundle / "config.json").read_bytes() == before
    assert shim.calls()[0]["argv"][1:] == ["create", "--no-pivot", "ctr", "--bundle", str(bundle)]


def test_legacy_mode_adds_our_hook_with_a_non_empty_env(shim, tmp_path, bindir):
    (bindir / "nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    (bindir / "nvidia-container-runtime-hook").chmod(0o755)
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    assert create(shim, bundle, program="nvidia-container-runtime.legacy").returncode == 0
    hooks = handed_over(shim)["hooks"]["prestart"]
    assert hooks == [{"path": str(bindir / "nvidia-container-runtime-hook"),
                      "args": ["nvidia-container-runtime-hook", "prestart"],
                      "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                              f"NVIDIA_CTK_CONFIG_FILE_PATH={shim.config}",
                              f"NVIDIA_CTK_CACHE_DIR={shim.cache_dir}"]}]


def test_legacy_mode_hands_the_hook_nvmls_time_limit(shim, tmp_path, bindir):
    """The hook reads NVML at the container's start: it waits as long as the shim was told to
    (NVIDIA_CTK_NVML_TIMEOUT), not its own default of 60 s."""
    (bindir / "nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    (bindir / "nvidia-container-runtime-hook").chmod(0o755)
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    result = create(shim, bundle, program="nvidia-container-runtime.legacy",
                    env=shim.env(NVIDIA_CTK_NVML_TIMEOUT="2.5"))
    assert result.returncode == 0, result.stderr
    hook, = handed_over(shim)["hooks"]["prestart"]
    assert hook["env"][-1] == "NVIDIA_CTK_NVML_TIMEOUT=2.5"
    from cdi.nvml import NVML_TIMEOUT_ENV
    from runtime_shim import runtime_cache

    assert runtime_cache.NVML_TIMEOUT_ENV == NVML_TIMEOUT_ENV   # spelled out there, not imported


def test_legacy_mode_hands_the_mps_pipe_directory_to_the_hook(shim, tmp_path, bindir):
    """The hook mounts the MPS directory of the shim's environment, as jit-cdi does (issue 22, item 9)."""
    (bindir / "nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    (bindir / "nvidia-container-runtime-hook").chmod(0o755)
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    env = shim.env(CUDA_MPS_PIPE_DIRECTORY="/srv/mps")
    assert create(shim, bundle, program="nvidia-container-runtime.legacy", env=env).returncode == 0
    [hook] = handed_over(shim)["hooks"]["prestart"]
    assert hook["env"][-1] == "CUDA_MPS_PIPE_DIRECTORY=/srv/mps"


def test_legacy_mode_keeps_an_equivalent_hook_once(shim, tmp_path, bindir):
    (bindir / "nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    (bindir / "nvidia-container-runtime-hook").chmod(0o755)
    spec = minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    spec["hooks"] = {"prestart": [DOCKER_HOOK]}
    bundle = make_bundle(tmp_path / "b", spec)
    before = (bundle / "config.json").read_bytes()
    assert create(shim, bundle, program="nvidia-container-runtime.legacy").returncode == 0
    assert (bundle / "config.json").read_bytes() == before


def test_cdi_program_name_forces_cdi_mode(shim, tmp_path):
    shim.write_config(f'mode = "legacy"\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{shim.spec_dir}"]\n')
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    assert create(shim, bundle, program="nvidia-container-runtime.cdi").returncode == 0
    new = handed_over(shim)
    assert "hooks" not in new and "/dev/nvidia0" in json.dumps(new["linux"]["devices"])


def test_legacy_mode_without_a_hook_program_is_an_error(shim, tmp_path):
    shim.write_config('mode = "legacy"\n[nvidia-container-runtime-hook]\npath = "/nonexistent/hook"\n')
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    result = create(shim, bundle)
    assert result.returncode == 1
    assert result.stderr == ("nvidia-container-runtime: error: the prestart hook /nonexistent/hook was not found "
                             "(nvidia-container-runtime-hook.path)\n")


def test_unreadable_bundle_is_one_line(shim, tmp_path):
    result = shim.run("create", "-b", str(tmp_path / "missing"), "ctr")
    assert result.returncode == 1
    assert result.stderr == (f"nvidia-container-runtime: error: cannot read the OCI spec: No such file or directory "
                             f"({tmp_path / 'missing' / 'config.json'})\n")


def test_debug_log_names_the_mode(shim, tmp_path):
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"]))
    assert create(shim, bundle).returncode == 0
    assert "container ctr asks for 1 (NVIDIA_VISIBLE_DEVICES): mode cdi" in shim.debug_log.read_text()


def test_a_broken_spec_file_is_a_warning_in_runcs_log(shim, tmp_path):
    (shim.spec_dir / "broken.json").write_text('{"cdiVersion": "0.5.0", "kind": "other.example/x"}')
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"]))
    result = create(shim, bundle)
    assert result.returncode == 0, result.stderr
    [line] = (bundle / "log.json").read_text().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "warning"
    assert entry["msg"].startswith("nvidia-container-runtime: CDI spec skipped: ")
    assert str(shim.spec_dir / "broken.json") in entry["msg"]
    assert "CDI spec skipped" in shim.debug_log.read_text()


@pytest.mark.parametrize("request_env", ["NVIDIA_VISIBLE_DEVICES=0", "FOO=bar"])
def test_config_json_that_is_a_symlink_is_refused_and_its_target_untouched(shim, tmp_path, request_env):
    """A config.json symlink would have the edits written through it into a file outside the bundle
    (issue 16.6); with or without a GPU request (the launcher's fast path opens it with O_NOFOLLOW
    too), the shim refuses it in one line and runs nothing."""
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(minimal_spec([request_env])))
    before = outside.read_bytes()
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").symlink_to(outside)
    result = create(shim, bundle)
    assert result.returncode == 1
    assert result.stderr == (f"nvidia-container-runtime: error: the OCI spec is a symbolic link (refused: the "
                             f"edits would be written outside the bundle) ({bundle / 'config.json'})\n")
    assert outside.read_bytes() == before
    assert (bundle / "config.json").is_symlink()
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json", "log.json"]
    assert not shim.calls()


def test_relative_cache_dir_disables_every_cache(shim, tmp_path):
    """A relative NVIDIA_CTK_CACHE_DIR would put the runtime cache and the CDI verdict cache under the
    shim's cwd, which under containerd is the bundle (issue 16.9): no cache is written or read."""
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    env = shim.env(NVIDIA_CTK_CACHE_DIR="cache")
    for _ in range(2):
        make_bundle(bundle, minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
        result = shim.run("create", "ctr", env=env, cwd=bundle)
        assert result.returncode == 0, result.stderr
        assert "/dev/nvidia0" in (bundle / "config.json").read_text()
        assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]
    shim.reset()
    for _ in range(2):  # every call goes to Python: the launcher reads no relative cache either
        assert shim.run("state", "ctr", env=env, cwd=bundle).returncode == 0
        assert shim.python_ran()
        shim.reset()
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]
    # a good cache that happens to be at that relative place is not read by the launcher either
    assert shim.run("state", "ctr", env=shim.env(NVIDIA_CTK_CACHE_DIR=str(bundle / "cache"))).returncode == 0
    shim.reset()
    assert shim.run("state", "ctr", env=env, cwd=bundle).returncode == 0
    assert shim.python_ran()


KILLED_WRITER = """
import os, signal, sys
sys.path[:0] = {path!r}
from runtime_shim import bundle_spec
os.rename = lambda *a: os.kill(os.getpid(), signal.SIGKILL)   # killed with its temp file written
document, _ = bundle_spec.read_spec(sys.argv[1])
bundle_spec.write_spec(sys.argv[1], document)
"""

HOLDER = """
import sys, time
sys.path[:0] = {path!r}
from runtime_shim import bundle_spec
fd, name = bundle_spec._create_locked_temp(sys.argv[1])   # a live writer, in the middle of its work
print(name, flush=True)
sys.stdin.read()
"""


def test_temp_files_of_killed_writers_are_removed_by_the_next_create(shim, tmp_path):
    """A SIGKILLed shim leaves `.config.json.<pid>.<hex>.tmp` in the bundle (issue 16.11): the next create
    removes such files when no live writer holds them, and touches nothing else."""
    import subprocess
    import sys

    from tests.unit.runtime_shim.test_hot_path import REPO

    path = [str(REPO)]
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER.format(path=path), str(bundle)], timeout=60)
    assert killed.returncode == -9
    [leftover] = [p for p in bundle.iterdir() if p.name != "config.json"]
    assert leftover.name.startswith(".config.json.") and leftover.stat().st_size > 0

    outside = tmp_path / "outside"
    outside.write_text("keep")
    decoys = {".config.json.1.0000000a.tmp": "symlink", ".config.json.2.0000000b.tmp": "dir",
              ".config.json.3.0000000c.tmp": "fifo", ".config.json.x.0000000d.tmp": "file",
              ".config.json.4.0000000G.tmp": "file", ".config.json.5.000000e.tmp": "file",
              "config.json.6.0000000f.tmp": "file"}
    for name, kind in decoys.items():
        if kind == "symlink":
            (bundle / name).symlink_to(outside)
        elif kind == "dir":
            (bundle / name).mkdir()
        elif kind == "fifo":
            os.mkfifo(bundle / name)
        else:
            (bundle / name).write_text("not ours")
    result = create(shim, bundle)
    assert result.returncode == 0, result.stderr
    assert "/dev/nvidia0" in (bundle / "config.json").read_text()
    assert not leftover.exists()
    assert sorted(p.name for p in bundle.iterdir()) == sorted(["config.json", *decoys])
    assert outside.read_text() == "keep" and (bundle / ".config.json.1.0000000a.tmp").is_symlink()

    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(path=path), str(bundle)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        held = holder.stdout.readline().strip()
        assert os.path.exists(held)
        make_bundle(bundle, minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
        assert create(shim, bundle).returncode == 0
        assert os.path.exists(held)                       # a live writer's file is left alone
    finally:
        holder.communicate("", timeout=30)
    # the holder is gone now: its file is a leftover like any other
    make_bundle(bundle, minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"]))
    assert create(shim, bundle).returncode == 0
    assert not os.path.exists(held)


def test_config_warnings_go_to_the_logs_never_to_stderr(shim, tmp_path):
    """For a create, the shim's stderr is the container's own stdio under docker and containerd (issue
    14.11: an unknown config key printed a bare warning into the container's output). Warnings go to
    runc's --log and the debug log, with the program's name; stderr stays empty."""
    shim.write_config(f'mode = "cdi"\nno-such-key = 1\n[nvidia-container-runtime.modes.cdi]\n'
                      f'spec-dirs = ["{shim.spec_dir}"]\n')
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    result = create(shim, bundle)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout == ""
    [line] = (bundle / "log.json").read_text().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "warning"
    assert entry["msg"] == f"nvidia-container-runtime: unknown config key nvidia-container-runtime.no-such-key ignored ({shim.config})"
    assert "level=warning msg=\"nvidia-container-runtime: unknown config key" in shim.debug_log.read_text()
    # a failure still prints its one error line on stderr; the warning before it reaches runc's log
    shim.write_config('no-such-key = 1\nmode = 5\n')
    (bundle / "log.json").unlink()
    result = create(shim, bundle)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("nvidia-container-runtime: error: ")
    assert [json.loads(x)["level"] for x in (bundle / "log.json").read_text().splitlines()] == ["warning", "error"]
