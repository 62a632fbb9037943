"""A broken NVML library is one error line in every program that reads NVML, never a traceback, a
SIGBUS, a SIGSEGV or a hang: a library missing symbols, a truncated one, a FIFO in its place, one whose
nvmlInit never returns or whose loading never ends (a constructor that waits for ever; both bounded by
NVIDIA_CTK_NVML_TIMEOUT), and one whose nvmlInit crashes. Each on a copy of the simulated host, through
the installed programs: nvidia-ctk info and cdi generate, nvidia-container-cli info, the shim in jit-cdi
mode and the prestart hook. (Through real runc: tests/e2e/test_nvml_hostile_library.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.hostile import HOSTILE_NVML_SOURCES, NVML_LIBRARY as LIBRARY, hostile_nvml_host
from tests.support.simulated_host import simulate_create

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (BIN / "nvidia-container-cli").exists(),
                                reason="needs root (device nodes of the simulated host) and the launchers")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    return simulate_create(tmp_path_factory.mktemp("nvml-faults") / "host", gpus=1, mig=None)


def broken_host(healthy: Path, tmp_path: Path, how: str) -> Path:
    root = tmp_path / f"host-{how}"
    if how in HOSTILE_NVML_SOURCES:
        return hostile_nvml_host(healthy, root, how)
    subprocess.run(["cp", "-a", str(healthy), str(root)], check=True)
    library = Path(os.path.realpath(root / LIBRARY))
    data = library.read_bytes()
    if how == "missing-symbols":      # a real shared object with almost nothing of NVML
        source = tmp_path / "nvml.c"
        source.write_text("int nvmlInit_v2(void) { return 0; }\nint nvmlShutdown(void) { return 0; }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    elif how == "truncated":          # the loader would map pages past the end: SIGBUS
        library.write_bytes(data[:len(data) // 2])
    elif how == "truncated-tail":     # every header there, the section header table cut off
        library.write_bytes(data[:-64])
    elif how == "fifo":               # dlopen would block opening it
        library.unlink()
        os.mkfifo(library)
    return root


EXPECTED = {
    "missing-symbols": "NVML query failed: nvmlSystemGetDriverVersion: Function Not Found (NVML)",
    "truncated": "the NVML library is unusable: ",
    "truncated-tail": "the NVML library is unusable: truncated: ",
    "fifo": "the NVML library is not a regular file",
    "hang": "NVML did not answer in 1 s in nvmlInit_v2: the driver or its library hangs; check the driver, "
            "or allow longer with NVIDIA_CTK_NVML_TIMEOUT (",
    "load-hang": "NVML did not answer in 1 s while loading the library (dlopen: its constructors): the driver or "
                 "its library hangs; check the driver, or allow longer with NVIDIA_CTK_NVML_TIMEOUT (",
    "init-crash": "the NVML library crashed (SIGSEGV) in nvmlInit_v2 (",
}


def one_line(result: subprocess.CompletedProcess, program: str) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr)   # not 135 (SIGBUS) nor a timeout
    line, = result.stderr.splitlines()
    assert line.startswith(f"{program}: error: "), line
    return line


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_NVML_TIMEOUT": "1", **kwargs.pop("env", {})}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, **kwargs)


@pytest.mark.parametrize("how", list(EXPECTED))
def test_nvidia_ctk_and_nvidia_container_cli(healthy, tmp_path, how):
    root = broken_host(healthy, tmp_path, how)
    started = time.monotonic()
    line = one_line(run([str(BIN / "nvidia-ctk"), "info", "--driver-root", str(root)]), "nvidia-ctk")
    assert EXPECTED[how] in line
    spec = tmp_path / "nvidia.yaml"
    line = one_line(run([str(BIN / "nvidia-ctk"), "cdi", "generate", "--driver-root", str(root), "--output",
                         str(spec)]), "nvidia-ctk")
    assert EXPECTED[how] in line and not spec.exists()
    line = one_line(run([str(BIN / "nvidia-container-cli"), "--root", str(root), "info"]), "nvidia-container-cli")
    assert EXPECTED[how] in line
    assert time.monotonic() - started < 30


def gpu_bundle(path: Path) -> Path:
    (path / "rootfs").mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "ociVersion": "1.0.2", "root": {"path": "rootfs"},
        "process": {"args": ["true"], "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"], "cwd": "/"}}))
    return path


@pytest.mark.parametrize("how", ["hang", "load-hang", "init-crash", "truncated"])
def test_the_shim_in_jit_cdi_mode_and_the_prestart_hook(healthy, tmp_path, how):
    root = broken_host(healthy, tmp_path, how)
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{root}"\n'
                      '[nvidia-container-runtime]\nmode = "jit-cdi"\nruntimes = ["/bin/true"]\n')
    env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "cache")}
    bundle = gpu_bundle(tmp_path / "bundle")
    before = (bundle / "config.json").read_bytes()
    log = tmp_path / "runc.log"
    shim = run([str(BIN / "nvidia-container-runtime"), "--log", str(log), "--log-format", "json", "create",
                "--bundle", str(bundle), "ctr"], env=env, cwd=bundle)
    assert EXPECTED[how] in one_line(shim, "nvidia-container-runtime")
    assert (bundle / "config.json").read_bytes() == before
    [entry] = [json.loads(line) for line in log.read_text().splitlines() if '"error"' in line]
    assert EXPECTED[how] in entry["msg"]
    hook = run([str(BIN / "nvidia-container-runtime-hook"), "prestart"], env=env,
               input=json.dumps({"bundle": str(bundle), "pid": os.getpid()}))
    assert EXPECTED[how] in one_line(hook, "nvidia-container-runtime-hook")


def test_the_limit_comes_from_the_environment():
    from cdi.nvml import DEFAULT_NVML_TIMEOUT, nvml_timeout

    assert nvml_timeout({}) == DEFAULT_NVML_TIMEOUT == 60
    assert nvml_timeout({"NVIDIA_CTK_NVML_TIMEOUT": "2.5"}) == 2.5
    for bad in ("", "0", "-1", "x", "nan", "inf", "1e9"):
        assert nvml_timeout({"NVIDIA_CTK_NVML_TIMEOUT": bad}) == DEFAULT_NVML_TIMEOUT
