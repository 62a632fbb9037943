"""The shim's create path imports only what it needs (DESIGN: no click, jsonschema, YAML or NVML on a
container's start path once the spec's verdict is cached), started as the launcher starts it. Nor json,
re or copy: config.json and the specs go through cdi.json_codec (json's own C scanner and encoder), which
spares ~12 ms per create on the test machines (json imports re, and re enum, functools, collections)."""
from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

from cdi.spec import ContainerEdits, Device, DeviceNode, Spec
from cdi.spec_file import write_spec
from tests.unit.runtime_shim.shim_env import make_bundle, minimal_spec

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("click", "jsonschema", "yaml", "pynvml", "cdi.discover", "cdi.nvml", "tomllib", "dataclasses", "hashlib",
         "json", "re", "copy", "enum", "functools", "collections")
PROBE = """
import os, sys
sys.path[:0] = {path!r}
from cdi import config_cache
config_cache.RECENT_NS = 0  # keep the test's just-written config.toml (see config_cache.write_document)
from runtime_shim import main
main.run("nvidia-container-runtime", ["create", "--bundle", sys.argv[1], "ctr"], dict(os.environ), None)
print(" ".join(sorted(m for m in sys.modules if m in {heavy!r} or m == "cdi.registry")))
"""


def run_create(tmp_path, bundle) -> list[str]:
    path = [str(REPO), sysconfig.get_paths()["purelib"]]
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "config.toml"),
           "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE.format(path=path, heavy=HEAVY), str(bundle)],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_create_imports_nothing_heavy(tmp_path):
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    write_spec(Spec(kind="nvidia.com/gpu", devices=[Device(name="0", container_edits=ContainerEdits(
        device_nodes=[DeviceNode(path="/dev/nvidia0", host_path="/dev/zero")]))]), spec_dir / "nvidia.json")
    fake = tmp_path / "runc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    (tmp_path / "config.toml").write_text(
        f'[nvidia-container-runtime]\nmode = "cdi"\nruntimes = ["{fake}"]\n'
        f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{spec_dir}"]\n')
    gpu = make_bundle(tmp_path / "gpu", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    run_create(tmp_path, gpu)                                   # the first create validates the spec
    make_bundle(tmp_path / "gpu", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    assert run_create(tmp_path, gpu) == ["cdi.registry"]       # later ones trust the cached verdict
    #                                                             and the kept config document (no tomllib)
    assert "/dev/nvidia0" in (gpu / "config.json").read_text()
    plain = make_bundle(tmp_path / "plain", minimal_spec(["NVIDIA_VISIBLE_DEVICES=void"]))
    assert run_create(tmp_path, plain) == []                    # no request: not even the spec dirs


def test_the_shims_own_modules_import_neither_logging_nor_dataclasses():
    code = ("import sys; sys.path[:0] = [%r]\n"
            "import runtime_shim.main, runtime_shim.bundle_spec, runtime_shim.low_level, runtime_shim.runtime_cache\n"
            "print(sorted(m for m in ('logging', 'dataclasses', 'tempfile', 'inspect') if m in sys.modules))"
            % str(REPO))
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
