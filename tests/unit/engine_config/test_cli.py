"""`nvidia-ctk runtime configure`: flags, messages, dry-run, errors as one line."""
import json
import os

import pytest

from ctk.main import main
from runtime_shim.engine_config.common import find_program

SHIM = "/opt/gct/bin/nvidia-container-runtime"


def ctk(*args):
    return main(["runtime", "configure", *args])


def test_dry_run_prints_diff_and_writes_nothing(tmp_path, capsys):
    cfg = tmp_path / "daemon.json"
    cfg.write_text('{\n  "debug": true\n}\n')
    assert ctk("--config", str(cfg), "--nvidia-runtime-path", SHIM, "--set-as-default", "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"+++ {cfg}" in out and '+  "default-runtime": "nvidia"' in out
    assert cfg.read_text() == '{\n  "debug": true\n}\n'
    assert os.listdir(tmp_path) == ["daemon.json"]


def test_configure_says_which_daemon_to_restart(tmp_path, capsys):
    cfg = tmp_path / "config.toml"
    assert ctk("--runtime", "containerd", "--config", str(cfg), "--runtime-path", SHIM) == 0
    err = capsys.readouterr().err
    assert f"wrote {tmp_path}/conf.d/99-nvidia.toml" in err and f"wrote {cfg}" in err
    assert "restart containerd" in err
    assert ctk("--runtime", "containerd", "--config", str(cfg), "--runtime-path", SHIM) == 0
    assert "nothing to change" in capsys.readouterr().err


def test_docker_runtimes_need_a_reload_and_features_a_restart(tmp_path, capsys):
    """Issue 27.6: dockerd re-reads runtimes and default-runtime on SIGHUP (its running containers keep
    running; tests/e2e/test_runtime_configure_e2e.py checks it with a real dockerd): no restart asked."""
    cfg = tmp_path / "daemon.json"
    assert ctk("--config", str(cfg), "--runtime-path", SHIM, "--set-as-default") == 0
    err = capsys.readouterr().err
    assert "nvidia-ctk: reload docker to apply this (nvidia-ctk does not), e.g. `systemctl reload docker` " \
           "(a SIGHUP to the daemon): running containers keep running\n" in err and "restart" not in err
    assert ctk("--config", str(cfg), "--runtime-path", SHIM, "--cdi.enabled") == 0
    assert "restart docker to apply this" in capsys.readouterr().err   # features: read at dockerd's start
    assert ctk("--config", str(cfg), "--remove") == 0
    assert "restart docker to apply this" in capsys.readouterr().err   # takes features.cdi out again
    assert ctk("--config", str(cfg), "--runtime-path", SHIM) == 0
    capsys.readouterr()
    assert ctk("--config", str(cfg), "--remove") == 0
    assert "reload docker to apply this" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="runs nvidia-ctk as another user (setpriv), which needs root")
def test_non_root_is_told_to_run_as_root_and_the_config_is_named(tmp_path):
    """Issue 27.6: as non-root the error named the temp file it could not create beside the config."""
    import subprocess
    import sys
    from pathlib import Path

    etc = tmp_path / "etc-docker"
    etc.mkdir()
    cfg = etc / "daemon.json"
    cfg.write_text("{}\n")
    repo = Path(__file__).resolve().parents[3]
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    argv = [*as_nobody, "-m", "ctk.main", "runtime", "configure", f"--config={cfg}", "--runtime-path=/bin/true"]
    # a checkout or venv in a closed directory (root's home, 0700) cannot run as nobody at all
    probe = subprocess.run([*as_nobody, "-c", "import ctk.main"], capture_output=True, text=True, cwd=repo,
                           timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"the checkout or its Python is closed to other users: {probe.stderr.strip()[-200:]}")
    # the temp dirs above are root's and closed (0700): the config is then unreadable, as a closed /etc is
    done = subprocess.run(argv, capture_output=True, text=True, cwd=repo, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"nvidia-ctk: error: cannot read config: Permission denied; run as root "
                           f"(sudo nvidia-ctk ...) ({cfg})\n")
    # readable (a nobody-traversable copy of the path) but in root's directory: the write fails
    opened = [p for p in (tmp_path, *tmp_path.parents) if p.stat().st_mode & 0o001 == 0]
    modes = {p: p.stat().st_mode & 0o7777 for p in opened}
    try:
        for p in opened:
            os.chmod(p, modes[p] | 0o001)
        done = subprocess.run(argv, capture_output=True, text=True, cwd=repo, timeout=60)
    finally:
        for p, mode in modes.items():
            os.chmod(p, mode)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"nvidia-ctk: error: cannot write config: Permission denied; run as root "
                           f"(sudo nvidia-ctk ...) ({cfg})\n")
    assert cfg.read_text() == "{}\n" and os.listdir(etc) == ["daemon.json"]


def test_aliases_of_the_real_tool(tmp_path):
    cfg = tmp_path / "daemon.json"
    assert ctk("--config", str(cfg), "--runtime-path", SHIM, "--nvidia-set-as-default", "--cdi.enable",
               "--nvidia-runtime-name", "gpu") == 0
    obj = json.loads(cfg.read_text())
    assert obj["runtimes"]["gpu"]["path"] == SHIM and obj["default-runtime"] == "gpu" and obj["features"]["cdi"]


def test_oci_hook_mode_writes_a_hook_file(tmp_path):
    hook_file = tmp_path / "oci-nvidia-hook.json"
    assert ctk("--config-mode", "oci-hook", "--oci-hook-path", str(hook_file),
               "--nvidia-runtime-hook-path", "/opt/gct/bin/nvidia-container-runtime-hook") == 0
    assert json.loads(hook_file.read_text())["hook"]["path"] == "/opt/gct/bin/nvidia-container-runtime-hook"


@pytest.mark.parametrize("args, message", [
    (["--oci-hook-path", "/tmp/x.json"], "--oci-hook-path needs --runtime=podman or --config-mode=oci-hook (--oci-hook-path)"),
    (["--nvidia-runtime-name", "a/b"], "invalid runtime name 'a/b' (--nvidia-runtime-name)"),
    (["--drop-in-config", "/tmp/x.toml"], "docker has no drop-in configs (--drop-in-config)"),
])
def test_bad_flags_are_one_line_errors(args, message, capsys):
    assert ctk(*args) == 1
    err = capsys.readouterr().err
    assert err == f"nvidia-ctk: error: {message}\n"


def test_broken_config_is_one_line_error_and_untouched(tmp_path, capsys):
    cfg = tmp_path / "config.toml"
    cfg.write_text("version = 2\n[plugins\n")
    assert ctk("--runtime", "containerd", "--config", str(cfg), "--runtime-path", SHIM) == 1
    err = capsys.readouterr().err
    assert err.startswith("nvidia-ctk: error: invalid TOML: ") and err.endswith(f"({cfg})\n")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert cfg.read_text() == "version = 2\n[plugins\n"


def test_unknown_runtime_is_a_usage_error(capsys):
    assert ctk("--runtime", "lxd") == 2
    assert "nvidia-ctk: error: " in capsys.readouterr().err


def test_find_program_prefers_the_directory_of_nvidia_ctk(tmp_path, monkeypatch):
    beside, on_path = tmp_path / "venv-bin", tmp_path / "path-bin"
    for d in (beside, on_path):
        d.mkdir()
        (d / "nvidia-container-runtime").write_text("#!/bin/sh\n")
        (d / "nvidia-container-runtime").chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    assert find_program("nvidia-container-runtime", [str(beside)]) == str(beside / "nvidia-container-runtime")
    assert find_program("nvidia-container-runtime", [str(tmp_path)]) == str(on_path / "nvidia-container-runtime")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_program("nvidia-container-runtime", []) == "/usr/bin/nvidia-container-runtime"


def test_empty_drop_in_path_is_refused(tmp_path, capsys):
    assert ctk("--runtime", "containerd", "--config", str(tmp_path / "c.toml"), "--drop-in-config", "",
               "--runtime-path", SHIM) == 1
    assert capsys.readouterr().err == ("nvidia-ctk: error: containerd is configured through a drop-in file; "
                                       "give its path (--drop-in-config)\n")
    assert os.listdir(tmp_path) == []


def test_default_runtime_path_is_the_one_beside_nvidia_ctk(tmp_path, monkeypatch, capsys):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("nvidia-ctk", "nvidia-container-runtime"):
        (bindir / name).write_text("#!/bin/sh\n")
        (bindir / name).chmod(0o755)
    monkeypatch.setattr("sys.argv", [str(bindir / "nvidia-ctk")])
    cfg = tmp_path / "daemon.json"
    assert ctk("--config", str(cfg)) == 0
    assert json.loads(cfg.read_text())["runtimes"]["nvidia"]["path"] == str(bindir / "nvidia-container-runtime")
    assert "warning" not in capsys.readouterr().err


def test_missing_runtime_executable_is_a_warning(tmp_path, capsys):
    assert ctk("--config", str(tmp_path / "daemon.json"), "--runtime-path", str(tmp_path / "nope")) == 0
    assert f"warning: {tmp_path / 'nope'} is not an executable here" in capsys.readouterr().err


@pytest.mark.parametrize("engine, name", [("docker", "daemon.json"), ("containerd", "config.toml")])
def test_dry_run_and_messages_escape_the_paths(tmp_path, capsys, engine, name):
    """A path holding a newline or an ESC is written as message_line writes it: no forged line, no
    terminal control, in the diff's headers as in the stderr lines."""
    folder = tmp_path / "a\nb\x1b[31m"
    folder.mkdir()
    cfg = folder / name
    shown = str(cfg).replace("\n", "\\n").replace("\x1b", "\\x1b")
    assert ctk("--runtime", engine, "--config", str(cfg), "--runtime-path", SHIM, "--dry-run") == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    assert f"+++ {shown}\n" in out
    assert all(line.startswith(("---", "+++", "@@", "+", "-", " ", "\\", "#")) for line in out.splitlines())
    assert ctk("--runtime", engine, "--config", str(cfg), "--runtime-path", SHIM) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and f"nvidia-ctk: wrote {shown}\n" in err
    assert all(line.startswith("nvidia-ctk: ") for line in err.splitlines())
