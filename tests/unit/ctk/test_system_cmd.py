"""`nvidia-ctk system create-dev-char-symlinks` (issue 27.2): NVIDIA's command, run on a simulated host's
real device nodes (mknod: root)."""
from __future__ import annotations

import os
import shutil

import pytest

from ctk.main import main
from tests.support.simulated_host import create_in_process


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("gcc") is None:
        pytest.skip("a simulated host has device nodes made with mknod (root) and is built with gcc")
    root = tmp_path_factory.mktemp("sys") / "host"
    create_in_process(root)
    return root


def test_links_every_nvidia_node_by_its_numbers_once(host, tmp_path, capsys):
    char = tmp_path / "dev" / "char"
    args = ["system", "create-dev-char-symlinks", "--driver-root", str(host), "--dev-char-path", str(char)]
    assert main([*args, "--dry-run"]) == 0
    assert not char.exists() and "would link" in capsys.readouterr().err
    assert main(args) == 0
    made = {p.name: os.path.realpath(p) for p in char.iterdir()}
    nodes = [host / "dev" / n for n in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm")]
    for node in nodes:
        rdev = node.stat().st_rdev
        assert made[f"{os.major(rdev)}:{os.minor(rdev)}"] == str(node)
    assert all(not os.path.isabs(os.readlink(char / name)) for name in made)
    assert len(capsys.readouterr().err.splitlines()) == len(made)
    assert main(args) == 0 and capsys.readouterr().err == ""   # nothing left to make


def test_no_driver_nodes_is_one_line(tmp_path, capsys):
    assert main(["system", "create-dev-char-symlinks", "--driver-root", str(tmp_path),
                 "--dev-char-path", str(tmp_path / "char")]) == 1
    assert capsys.readouterr().err == (f"nvidia-ctk: error: no NVIDIA device nodes found (is the driver loaded?) "
                                       f"({tmp_path}/dev)\n")
