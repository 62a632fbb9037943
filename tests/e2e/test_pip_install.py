"""The wheel as a pip user gets it (issue 14, item 21): `pip install` of the built wheel into a fresh venv
puts every program on the venv's PATH in one step (static launchers from the wheel's scripts, which
learn their interpreter from the file pip rewrites beside them), they run with a hostile environment,
and `pip uninstall` takes every one of them away again. Needs gcc and libc6-dev (the wheel's build)
and the package index for the build and the dependencies."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdi.nvml import NVML_INVENTORY_PROGRAM
from launcher.install_launchers import INTERPRETER_FILE, PROGRAMS, TEST_ONLY_PROGRAMS
from tests.support.hostile import marker_preload_library, marker_python_files

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
WHEEL_PROGRAMS = sorted(set(PROGRAMS) - set(TEST_ONLY_PROGRAMS))


def pip_env(tmp_path: Path) -> dict[str, str]:
    """pip's own settings and proxies of the caller; temp files and cache in the test's dir."""
    keep = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k.lower().endswith("_proxy")
            or k in ("HOME", "SSL_CERT_FILE")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {**keep, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR": str(tmp_path / "tmp"),
            "PIP_CACHE_DIR": str(tmp_path / "pip-cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def sh(argv, env, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=600, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stderr[-2000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("building the wheel needs gcc")
    tmp = tmp_path_factory.mktemp("pip")
    env = pip_env(tmp)
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", tmp / "wheels", REPO], env)
    (wheel,) = (tmp / "wheels").glob("*.whl")
    venv = tmp / "venv"
    sh([os.path.realpath(sys.executable), "-m", "venv", venv], env)   # a fresh venv on the same interpreter
    sh([venv / "bin/python", "-m", "pip", "install", "--quiet", wheel], env)
    return venv, env


def test_pip_install_puts_every_program_on_path(installed, tmp_path):
    venv, env = installed
    bindir = venv / "bin"
    for name in WHEEL_PROGRAMS:
        assert (bindir / name).read_bytes()[:4] == b"\x7fELF", name
    assert (bindir / INTERPRETER_FILE).read_text().splitlines()[0] == f"#!{venv}/bin/python"
    # the launchers' NVML reader is there too, and runs (its own one-line error without arguments)
    done = subprocess.run([bindir / NVML_INVENTORY_PROGRAM], capture_output=True, text=True, env={}, timeout=60)
    assert (done.returncode, done.stdout) == (1, "") and done.stderr.startswith("gct-nvml-inventory: error: ")
    # the runtime's create below would keep its runtime cache in the machine's /run and read /etc's config
    path = {**env, "PATH": f"{bindir}:{env['PATH']}", "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "cache"),
            "NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "no-config.toml")}
    for program in WHEEL_PROGRAMS:   # Python's and C's (the version baked in at the wheel's build) alike
        first = sh([program, "--version"], path).stdout.splitlines()[0]
        assert first == f"{program} (gpu-container-toolkit) 0.1.0", first
    assert "create-symlinks" in sh(["nvidia-ctk", "hook", "--help"], path).stdout
    assert "create-symlinks" in sh(["nvidia-cdi-hook", "--help"], path).stdout
    assert sh(["nvidia-container-runtime-hook", "poststart"], path).stderr == ""
    assert sh(["nvidia-container-cli", "--help"], path).stdout.startswith("usage: nvidia-container-cli")
    # the runtime's Python side starts too: a create without a bundle is its own one-line error
    for runtime in ("nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy"):
        done = subprocess.run([runtime, "create", "--bundle", str(tmp_path / "none"), "c"], capture_output=True,
                              text=True, env=path, timeout=60)
        assert done.returncode != 0 and done.stderr.startswith(f"{runtime}: error: ") \
            and "Traceback" not in done.stderr, done.stderr
    # and the admin CLI finds the programs beside itself
    done = subprocess.run(["nvidia-ctk", "runtime", "configure", "--config", str(tmp_path / "daemon.json"),
                           "--dry-run"], capture_output=True, text=True, env=path, timeout=60)
    assert f'"path": "{bindir}/nvidia-container-runtime"' in done.stdout, done.stdout + done.stderr


def test_a_hostile_environment_reaches_neither_python_nor_the_launcher(installed, tmp_path):
    venv, env = installed
    markers, evil = tmp_path / "markers", tmp_path / "evil"
    markers.mkdir()
    evil.mkdir()
    marker_preload_library(evil, markers)
    marker_python_files(evil, markers, ("sitecustomize", "usercustomize", "json", "hook"))
    hostile = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(evil / "preload.so"), "PYTHONPATH": str(evil),
               "PYTHONHOME": str(evil), "PYTHONUSERBASE": str(evil)}
    assert sh([venv / "bin/nvidia-container-cli", "--help"], hostile).stdout.startswith("usage:")
    assert sh([venv / "bin/nvidia-container-runtime-hook", "poststop"], hostile).returncode == 0
    assert os.listdir(markers) == []


def test_pip_uninstall_takes_every_program_away(installed):
    venv, env = installed
    sh([venv / "bin/python", "-m", "pip", "uninstall", "--yes", "--quiet", "gpu-container-toolkit"], env)
    left = {p.name for p in (venv / "bin").iterdir()} & {*WHEEL_PROGRAMS, NVML_INVENTORY_PROGRAM, INTERPRETER_FILE}
    assert not left
