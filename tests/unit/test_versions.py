"""`--version` of every program names the toolkit and its version, one line in one form, from one source:
pyproject.toml's [project] version (issue 14.13: the runtime printed only runc's, the hook took -version
for an error, nvidia-cdi-hook ignored it). The runtime prints its line and then runc's, exactly when runc
itself prints its version (the argv table's `version` cases), from the launcher and from Python alike."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from launcher import install_launchers
from tests.unit.runtime_shim.argv_table import CASES, parametrize_cases
from tests.unit.runtime_shim.shim_env import make_shim_env

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
FAKE_RUNC = "#!/bin/sh\necho 'fake-runc version 9'\n"


def line(program: str) -> str:
    return f"{program} (gpu-container-toolkit) {VERSION}"


@pytest.fixture(scope="module")
def bindir(tmp_path_factory):
    path = tmp_path_factory.mktemp("versions") / "bin"   # gct-nvml-inventory goes into ../libexec
    install_launchers.install(path, sys.executable)
    return path


def run(argv, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60, **kwargs)


@pytest.mark.parametrize("program, flag, extra", [
    ("nvidia-container-runtime-hook", "-version", ""),
    ("nvidia-container-runtime-hook", "--version", ""),
    ("nvidia-container-runtime-hook", "-version=true", ""),
    ("nvidia-container-cli", "--version", "cli-version: 1.20.0\n"),
    ("nvidia-container-cli", "-V", "cli-version: 1.20.0\n"),
    ("nvidia-cdi-hook", "--version", ""),
    ("nvidia-cdi-hook", "-v", ""),
])
def test_each_launched_program_prints_the_toolkit_and_its_version(bindir, program, flag, extra):
    done = run([bindir / program, flag], env={})
    assert (done.returncode, done.stdout, done.stderr) == (0, line(program) + "\n" + extra, "")


def test_nvidia_ctk_prints_the_toolkit_and_its_version():
    done = run([sys.executable, "-m", "ctk.main", "--version"])
    assert (done.returncode, done.stdout) == (0, line("nvidia-ctk") + "\n")


@pytest.fixture
def shim(tmp_path, bindir):
    env = make_shim_env(tmp_path, bindir)
    env.runtime.write_text(FAKE_RUNC)
    return env


@pytest.mark.parametrize("program", ["nvidia-container-runtime", "nvidia-container-runtime.cdi"])
def test_the_runtime_prints_its_line_then_runcs_from_python_and_from_the_launcher(shim, program):
    first = shim.run("--version", program=program)
    assert shim.python_ran()  # no cache yet: Python answers, and writes one
    shim.reset()
    second = shim.run("--version", program=program)
    assert not shim.python_ran()  # from the cache: the launcher answers
    for done in (first, second):
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout == f"{line(program)}\n\nfake-runc version 9\n"


def test_the_runtimes_version_without_runc_or_crun_prints_ours_then_warns(shim):
    """Issue 27.7: with no low-level runtime installed, --version failed (exit 1). It prints ours, then one
    warning line saying none was found and what to do; exit 0 (this program answered; a container start
    still fails with the same line as an error)."""
    shim.runtime.unlink()
    done = shim.run("--version")
    assert (done.returncode, done.stdout) == (0, line("nvidia-container-runtime") + "\n\n")
    assert done.stderr.startswith("nvidia-container-runtime: warning: no low-level runtime found (tried ")
    assert done.stderr.endswith("install runc or crun, or name one in the config's runtimes "
                                "(nvidia-container-runtime.runtimes)\n") and done.stderr.count("\n") == 1
    started = shim.run("state", "x")
    assert started.returncode == 1 and started.stderr.startswith("nvidia-container-runtime: error: no low-level")


@parametrize_cases([c for c in CASES if c["command"] is None or any("-v" in a for a in c["argv"])])
def test_the_runtime_prints_its_line_exactly_when_runc_prints_its_version(shim, case):
    for _ in range(2):  # Python, then the launcher from the cache
        done = shim.run(*case["argv"])
        assert done.stdout.startswith(line("nvidia-container-runtime") + "\n") == case.get("version", False), done
