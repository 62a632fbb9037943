"""`nvidia-ctk simulate create` and `nvidia-ctk info` fail with one clear line, never a traceback,
and a refused `simulate create` leaves nothing behind."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def ctk(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctk.main", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def assert_one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-ctk: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize("args, fragments", [
    (["--mig", "0:1g.5gb"], ["expected GPU=PROFILE", "(--mig 0:1g.5gb)"]),
    (["--mig", "0=1g.5gb,bogus"], ["unknown MIG profile 'bogus'", "known: 1g.5gb"]),
    (["--mig", "0=" + ",".join(["1g.5gb"] * 8)], ["at most 7 per GPU"]),
    (["--mig", "0=3g.20gb,3g.20gb,2g.10gb"], ["do not fit"]),
    (["--gpus", "17"], ["1 to 16", "(--gpus)"]),
    (["--model", "GeForce 256"], ["unknown GPU model"]),
    (["--cuda-version", "12"], ["invalid CUDA version"]),
])
def test_simulate_create_rejects_bad_options(tmp_path, args, fragments):
    target = tmp_path / "host"
    assert_one_line_error(ctk("simulate", "create", str(target), *args), *fragments)
    assert not target.exists()
    assert os.listdir(tmp_path) == []   # no staging directory left either


def test_simulate_create_refuses_a_directory_with_other_content(tmp_path):
    (tmp_path / "precious").write_text("keep me")
    assert_one_line_error(ctk("simulate", "create", str(tmp_path), "--force"),
                          "not a simulated host", str(tmp_path))
    assert (tmp_path / "precious").read_text() == "keep me"


def test_usage_errors_keep_clicks_message_and_exit_2(tmp_path):
    done = ctk("simulate", "create", str(tmp_path / "h"), "--gpus", "two")
    assert done.returncode == 2 and "nvidia-ctk: error:" in done.stderr and "Traceback" not in done.stderr


def test_info_without_a_driver_is_one_line(tmp_path):
    assert_one_line_error(ctk("info", "--driver-root", str(tmp_path)),
                          "libnvidia-ml.so.1 not found in the driver root", str(tmp_path))
    assert_one_line_error(ctk("info", env={"NVIDIA_CTK_DRIVER_ROOT": str(tmp_path / "missing")}),
                          "NVIDIA_CTK_DRIVER_ROOT")
    if not os.path.exists("/proc/driver/nvidia"):
        config = tmp_path / "config.toml"
        config.write_text("")
        assert_one_line_error(ctk("info", env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config),
                                               "NVIDIA_CTK_DRIVER_ROOT": ""}),
                              "no NVIDIA driver", "driver root /")


def test_info_reads_the_driver_root_from_config_toml(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{tmp_path / "from-config"}"\n')
    assert_one_line_error(ctk("info", env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_DRIVER_ROOT": ""}),
                          "from-config", "nvidia-container-cli.root")


def test_help_lists_both_commands():
    done = ctk("--help")
    assert done.returncode == 0 and "info" in done.stdout and "simulate" in done.stdout
    assert "--mig" in ctk("simulate", "create", "--help").stdout


def test_a_broken_config_only_matters_when_it_is_consulted(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("this is [not toml")
    env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_DRIVER_ROOT": ""}
    assert_one_line_error(ctk("info", env=env), str(config))
    # with an explicit root the config is not read: the error is about that root instead
    assert_one_line_error(ctk("info", "--driver-root", str(tmp_path), env=env), "libnvidia-ml.so.1 not found")


def test_simulate_exec_names_an_odd_directory_on_one_line(tmp_path):
    """simulator.namespace (what `simulate exec` runs under unshare) builds its lines with the one
    line builder: a newline or an escape sequence in DIR stays visible and forges no second line."""
    odd = tmp_path / "a\nnvidia-ctk: error: forged\x1b[2J"
    odd.mkdir()
    done = subprocess.run([sys.executable, "-m", "simulator.namespace", str(odd), "--", "true"],
                          capture_output=True, text=True)
    assert_one_line_error(done, "not a simulated host (no marker file)", repr(str(odd)))
    assert "\x1b" not in done.stderr
