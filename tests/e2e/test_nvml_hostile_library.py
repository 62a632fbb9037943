"""A driver whose libnvidia-ml.so.1 hangs while loading (a constructor that waits for ever), whose
nvmlInit never returns, or whose nvmlInit crashes, through the shim and real runc: in jit-cdi mode (the
shim reads NVML) and in legacy mode (the prestart hook the shim adds reads it, started by runc), `create`
ends within NVIDIA_CTK_NVML_TIMEOUT (1 s here; the legacy hook gets it from the shim through its entry's
env) with one error line naming the library, and no container exists afterwards."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.bundle import make_bundle
from tests.e2e.shim_host import SHIM, ShimLifecycle, shim_env
from tests.support.hostile import NVML_LIBRARY, hostile_nvml_host
from tests.support.simulated_host import simulate_create

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runc") is None or not SHIM.exists(),
                                reason="needs root, runc and the launchers (make venv)")

HANGS = "the driver or its library hangs; check the driver, or allow longer with NVIDIA_CTK_NVML_TIMEOUT"
EXPECTED = {
    "load-hang": f"NVML did not answer in 1 s while loading the library (dlopen: its constructors): {HANGS}",
    "hang": f"NVML did not answer in 1 s in nvmlInit_v2: {HANGS}",
    "init-crash": "the NVML library crashed (SIGSEGV) in nvmlInit_v2",
}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    return simulate_create(tmp_path_factory.mktemp("nvml-hostile") / "host", gpus=1, mig=None)


@pytest.mark.parametrize("mode, how", [("jit-cdi", "load-hang"), ("jit-cdi", "init-crash"),
                                       ("legacy", "load-hang"), ("legacy", "init-crash"), ("legacy", "hang")])
def test_create_fails_in_bounded_time_with_one_line_and_no_container(healthy, tmp_path, mode, how):
    root = hostile_nvml_host(healthy, tmp_path / "host", how)
    library = (root / NVML_LIBRARY).resolve()
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{root}"\n'
                      f'[nvidia-container-runtime]\nmode = "{mode}"\nruntimes = ["runc"]\n')
    state = tmp_path / "state"
    lifecycle = ShimLifecycle({**shim_env(config, tmp_path / "cache"), "NVIDIA_CTK_NVML_TIMEOUT": "1"}, state)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", "echo STARTED"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    before = (bundle / "config.json").read_bytes()
    started = time.monotonic()
    code, output, stderr = lifecycle.run(bundle)
    took = time.monotonic() - started
    assert code != 0 and output == "", (code, output, stderr)
    line = f"{EXPECTED[how]} ({library})"
    if mode == "jit-cdi":   # the shim's own line, before config.json was touched
        assert stderr == f"nvidia-container-runtime: error: {line}\n"
        assert (bundle / "config.json").read_bytes() == before
    else:                   # runc's line about the hook holds the hook's
        assert f"nvidia-container-runtime-hook: error: {line}" in stderr, stderr
    assert took < 20, took   # the legacy hook's own default would be 60 s
    listed = subprocess.run(["runc", "--root", str(state), "list", "-q"], capture_output=True, text=True, check=True)
    assert listed.stdout == ""
