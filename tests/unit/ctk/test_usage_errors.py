"""Usage errors of nvidia-ctk are one line, `nvidia-ctk: error: <what> (see <command> --help)`, exit 2
(issue 27.7: click printed its usage line first, two lines where README promises one)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from ctk.group import COMMANDS


def ctk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctk.main", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, line", [
    (["--bogus"], "no such option '--bogus' (see nvidia-ctk --help)"),
    (["nosuch"], "no such command 'nosuch' (see nvidia-ctk --help)"),
    (["cdi", "generate", "--bogus"], "no such option '--bogus' (see nvidia-ctk cdi generate --help)"),
    (["cdi", "generate", "--format", "xml"], "invalid value for '--format': 'xml' is not one of 'yaml', 'json' "
                                             "(see nvidia-ctk cdi generate --help)"),
    (["runtime", "configure", "--runtime", "lxd"], "invalid value for '--runtime': 'lxd' is not one of 'docker', "
     "'containerd', 'crio', 'podman' (see nvidia-ctk runtime configure --help)"),
    (["config", "--set"], "option '--set' requires an argument"),   # click gives no command here
    ([], f"missing command: {', '.join(sorted(COMMANDS))} (see nvidia-ctk --help)"),
    (["cdi"], "missing command: generate, list, transform, validate (see nvidia-ctk cdi --help)"),
])
def test_a_usage_error_is_one_line(args, line):
    done = ctk(*args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"nvidia-ctk: error: {line}\n")
