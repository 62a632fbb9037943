"""Every configuration file the programs read (config.toml, daemon.json, containerd's and CRI-O's TOML,
podman's hooks.d file) is read by one reader (cdi.regular_file.read_config_file): at most
MAX_CONFIG_BYTES, a regular file only (a link to /dev/zero, a FIFO, a directory are refused, and a
FIFO never blocks), a symlink to a regular file followed; a document nested too deeply is one error
line naming the file, never a traceback (issue 22, item 7)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cdi.config import load_config
from cdi.errors import ConfigError
from cdi.regular_file import MAX_CONFIG_BYTES
from ctk.main import main
from runtime_shim.engine_config.podman import hook_document

NVIDIA_CTK = os.path.join(os.path.dirname(sys.executable), "nvidia-ctk")
SHIM = "/opt/gct/bin/nvidia-container-runtime"
DEEP = 100_000

# (argv before the file, the file's name): every command that reads a config file named by --config
COMMANDS = {
    "config": (["config", "--in-place", "--set", "nvidia-container-cli.no-cgroups", "--config-file"], "config.toml"),
    "docker": (["runtime", "configure", "--runtime-path", SHIM, "--config"], "daemon.json"),
    "containerd": (["runtime", "configure", "--runtime=containerd", "--runtime-path", SHIM, "--config"],
                   "config.toml"),
    "crio": (["runtime", "configure", "--runtime=crio", "--runtime-path", SHIM, "--config"], "crio.conf"),
    "podman": (["runtime", "configure", "--runtime=podman", "--nvidia-runtime-hook-path", SHIM, "--config"],
               "oci-nvidia-hook.json"),
}
JSON_FILES = ("daemon.json", "oci-nvidia-hook.json")


def deep_document(name: str) -> str:
    if name.endswith(".json"):
        return "[" * DEEP + "]" * DEEP + "\n"
    return "a = " + "[" * DEEP + "]" * DEEP + "\n"


def run(command: str, path) -> tuple[int, str]:
    argv, _ = COMMANDS[command]
    # a subprocess with a timeout: a reader that blocks on a FIFO fails the test instead of hanging it
    result = subprocess.run([NVIDIA_CTK, *argv, str(path)], capture_output=True, text=True, timeout=60)
    return result.returncode, result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_link_to_dev_zero_is_refused_in_one_line(command, tmp_path):
    path = tmp_path / COMMANDS[command][1]
    path.symlink_to("/dev/zero")
    assert run(command, path) == (1, f"nvidia-ctk: error: cannot read config: not a regular file ({path})\n")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_is_refused_without_blocking(command, tmp_path):
    path = tmp_path / COMMANDS[command][1]
    os.mkfifo(path)
    assert run(command, path) == (1, f"nvidia-ctk: error: cannot read config: not a regular file ({path})\n")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_over_the_limit_is_refused(command, tmp_path):
    path = tmp_path / COMMANDS[command][1]
    path.write_bytes(b" " * (MAX_CONFIG_BYTES + 1))
    assert run(command, path) == (
        1, f"nvidia-ctk: error: cannot read config: larger than {MAX_CONFIG_BYTES} bytes ({path})\n")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_deeply_nested_document_is_one_line(command, tmp_path):
    path = tmp_path / COMMANDS[command][1]
    path.write_text(deep_document(path.name))
    rc, err = run(command, path)
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    expected = "invalid JSON: nested too deeply" if path.name in JSON_FILES else "invalid TOML: "
    assert err.startswith(f"nvidia-ctk: error: {expected}") and err.endswith(f" ({path})\n"), err


@pytest.mark.parametrize("command", COMMANDS)
def test_a_symlink_to_a_regular_file_is_read_and_written_through(command, tmp_path):
    real = tmp_path / "elsewhere" / COMMANDS[command][1]
    real.parent.mkdir()
    before = json.dumps(hook_document("/old/nvidia-container-runtime-hook")) if command == "podman" else ""
    real.write_text(before)
    link = tmp_path / COMMANDS[command][1]
    link.symlink_to(real)
    rc, err = run(command, link)
    assert rc == 0, err
    assert link.is_symlink()
    if command != "crio":   # CRI-O's change goes to a drop-in; the others edit the file the link names
        assert real.read_text() != before


def test_load_config_refuses_what_is_not_a_bounded_regular_file(tmp_path):
    """config.toml as every program reads it (cdi.config.load_config): the same reader."""
    zero, fifo, big, deep = (tmp_path / n for n in ("zero.toml", "fifo.toml", "big.toml", "deep.toml"))
    zero.symlink_to("/dev/zero")
    os.mkfifo(fifo)
    big.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    deep.write_text(deep_document("deep.toml"))
    for path, what in ((zero, "cannot read config: not a regular file"), (fifo, "cannot read config: not a regular file"),
                       (big, f"cannot read config: larger than {MAX_CONFIG_BYTES} bytes"), (deep, "invalid TOML: ")):
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert err.value.what.startswith(what) and err.value.where == str(path)


def test_a_file_of_exactly_the_limit_is_read(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_bytes(b"#" * (MAX_CONFIG_BYTES - 1) + b"\n")
    assert main(["config", "--config-file", str(path)]) == 0
    assert capsys.readouterr().out.startswith("#")
