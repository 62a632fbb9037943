"""The wheel as a pip user gets it (issue 14, item 21): `pip install` of the built wheel into a fresh venv
puts every program on the venv's PATH in one step (static launchers from the wheel's scripts, which
learn their interpreter from the file pip rewrites beside them), they run with a hostile environment,
and `pip uninstall` takes every one of them away again. Needs gcc and libc6-dev (the wheel's build)
and the package index for the build and the dependencies."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cdi.nvml import NVML_INVENTORY_PROGRAM
from launcher.install_launchers import INTERPRETER_FILE, PROGRAMS, TEST_ONLY_PROGRAMS
from tests.support.hostile import marker_preload_library, marker_python_files

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
WHEEL_PROGRAMS = sorted(set(PROGRAMS) - set(TEST_ONLY_PROGRAMS))
BUILD: dict = {}   # the wheel's build: what pip printed, the wheel


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
    built = sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", tmp / "wheels", REPO], env)
    (wheel,) = (tmp / "wheels").glob("*.whl")
    BUILD["output"], BUILD["wheel"] = built.stdout + built.stderr, wheel
    venv = tmp / "venv"
    sh([os.path.realpath(sys.executable), "-m", "venv", venv], env)   # a fresh venv on the same interpreter
    sh([venv / "bin/python", "-m", "pip", "install", "--quiet", wheel], env)
    return venv, env


def test_the_wheel_builds_without_the_license_deprecation_warning(installed):
    """setuptools warned three times per build that a `project.license` table is deprecated (issue 27,
    item 11): pyproject.toml gives it as an SPDX expression, with setuptools>=77."""
    assert "project.license" not in BUILD["output"], BUILD["output"][-3000:]
    with zipfile.ZipFile(BUILD["wheel"]) as wheel:
        metadata = wheel.read("gpu_container_toolkit-0.1.0.dist-info/METADATA").decode()
    assert "\nLicense-Expression: Apache-2.0\n" in metadata


def test_the_wheels_top_level_packages_are_the_documented_ones(installed):
    """The wheel installs the source tree's folders as top-level packages, which may clash with other
    distributions in one environment; docs/packaging.md says which, why they stay for now and what to
    do (issue 27, item 11). A new top-level package must be added there."""
    with zipfile.ZipFile(BUILD["wheel"]) as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist() if "/" in name and ".dist-info/" not in name
                and ".data/" not in name}
    section = (REPO / "docs/packaging.md").read_text().split("## The wheel's top-level packages")[1].split("\n## ")[0]
    documented = set(re.findall(r"`([a-z_]+)/`", section.split("\n\n")[1]))
    assert tops == documented, (sorted(tops), sorted(documented))


def test_pip_install_puts_every_program_on_path(installed, tmp_path):
    venv, env = installed
    bindir = venv / "bin"
    for name in WHEEL_PROGRAMS:
        assert (bindir / name).read_bytes()[:4] == b"\x7fELF", name
    assert (bindir / INTERPRETER_FILE).read_text().splitlines()[0] == f"#!{venv}/bin/python"
    # the launchers' NVML reader is there too, in the venv's libexec/ (the wheel's data; off PATH), and runs
    # (its own one-line error without arguments)
    assert not (bindir / NVML_INVENTORY_PROGRAM).exists()
    done = subprocess.run([venv / "libexec" / NVML_INVENTORY_PROGRAM], capture_output=True, text=True, env={},
                          timeout=60)
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
    assert not (venv / "libexec" / NVML_INVENTORY_PROGRAM).exists()
