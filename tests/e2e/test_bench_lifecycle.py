"""`python -m bench lifecycle` (issue 15's measurement) runs end to end, so it cannot rot unnoticed:
one round of every row on fresh-install hosts in private mount namespaces, the machine left as found."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from bench import fresh_host, gpu_lifecycle
from cdi.config import load_config
from runtime_shim import runtime_cache

pytestmark = pytest.mark.e2e


def test_the_packaged_config_gets_the_driver_root_and_the_mode(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(fresh_host.packaged_config(Path("/opt/driver"), mode="jit-cdi"))
    loaded = load_config(config, {})
    assert loaded.nvidia_container_cli.root == "/opt/driver"
    assert loaded.nvidia_container_runtime.mode == "jit-cdi"
    config.write_text(fresh_host.packaged_config(Path("/opt/driver")))
    assert load_config(config, {}).nvidia_container_runtime.mode == "auto"


LABELS = ["runc, no GPU", "shim, no GPU request", "shim, 1 GPU, cdi (auto mode picks it)",
          'shim, 1 GPU, jit-cdi (mode = "jit-cdi")', "shim .legacy + prestart hook, 1 GPU",
          "runc on the cdi row's config.json", "cdi, config by env var + cache dir",
          "cdi, config by env var, no cache dir"]


def test_one_round_of_every_row_leaves_the_machine_as_found():
    if os.geteuid() != 0:
        pytest.skip("needs root (runc, mount namespaces)")
    before = fresh_host.machine_state(Path("/nonexistent"))
    out = gpu_lifecycle.run(1, env_rows=True)
    lines = out.splitlines()
    rows = [line for line in lines if " ms  (min " in line]
    # every row on a fresh rootfs (the default), then again as a restart (its rootfs reused)
    assert [line.split(" median ")[0].strip() for line in rows] == LABELS + ["restart: " + label for label in LABELS]
    assert all("n=1)" in line for line in rows)
    assert all(re.search(r"ratio +\d+\.\d\dx vs runc, no GPU, paired +\d+\.\d\dx$", line) for line in rows[1:8])
    assert all(re.search(r"ratio +\d+\.\d\dx vs restart: runc, no GPU, paired +\d+\.\d\dx$", line)
               for line in rows[9:])
    verdicts = [line for line in lines if "plain runc (goal <=" in line]
    goals = [("shim, 1 GPU, cdi (auto mode picks it)", "1.5"), ('shim, 1 GPU, jit-cdi (mode = "jit-cdi")', "1.5")]
    expected = goals + [("shim .legacy + prestart hook, 1 GPU", "1.8")]
    expected += [("restart: " + label, goal) for label, goal in goals]
    expected += [("restart: shim .legacy + prestart hook, 1 GPU", "2.0")]
    assert len(verdicts) == len(expected)
    for verdict, (label, goal) in zip(verdicts, expected):
        assert re.fullmatch(re.escape(label) + r": \d+\.\d\dx plain runc \(goal <= " + goal + r"x\) (OK|OVER)",
                            verdict), verdict
    assert lines[-4].startswith("NVIDIA's runtime: ")
    assert lines[-3].startswith("machine left as found:")
    assert re.fullmatch(r"load average before: [\d.]+ [\d.]+ [\d.]+ \(1, 5, 15 min; \d+ cores\)", lines[-2])
    assert lines[-1].startswith("load average after: ")
    assert fresh_host.machine_state(Path("/nonexistent")) == before


def test_a_fresh_copy_replaces_what_a_run_left(tmp_path):
    image = tmp_path / "image"
    (image / "etc").mkdir(parents=True)
    (image / "etc/ld.so.cache").write_text("the image's")
    (image / "lib").symlink_to("usr/lib")
    (tmp_path / "bundle").mkdir()
    rootfs = tmp_path / "bundle/rootfs"
    fresh_host.fresh_copy(image, rootfs)
    (rootfs / "etc/ld.so.cache").write_text("a run's")
    (rootfs / "dev").mkdir()
    fresh_host.fresh_copy(image, rootfs)
    assert sorted(p.name for p in rootfs.iterdir()) == ["etc", "lib"]
    assert (rootfs / "etc/ld.so.cache").read_text() == "the image's"
    assert os.readlink(rootfs / "lib") == "usr/lib"


def test_nvidia_build_is_named_by_the_variable_and_never_ours(tmp_path):
    scratch = tmp_path / "version-cache"
    assert gpu_lifecycle.nvidia_build({}, scratch) == (
        None, "NVIDIA's runtime: row skipped (GCT_BENCH_NVIDIA_BIN does not name a dir with NVIDIA's build)")
    assert gpu_lifecycle.nvidia_build({"GCT_BENCH_NVIDIA_BIN": str(tmp_path)}, scratch)[1] == (
        f"NVIDIA's runtime: row skipped (no executable {tmp_path}/nvidia-container-runtime.cdi)")
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "nvidia-container-runtime.cdi").symlink_to(gpu_lifecycle.SHIM + ".cdi")
    assert gpu_lifecycle.nvidia_build({"GCT_BENCH_NVIDIA_BIN": str(ours)}, scratch)[0] is None
    # our runtime's --version kept its runtime cache in scratch, not in the machine's /run
    assert [p.name for p in scratch.glob("runtime-*.cache")] == [runtime_cache.cache_file({}).rsplit("/", 1)[1]]
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "nvidia-container-runtime.cdi").write_text("#!/bin/sh\necho 'NVIDIA Container Runtime version 1.17.8'\n")
    (theirs / "nvidia-container-runtime.cdi").chmod(0o755)
    assert gpu_lifecycle.nvidia_build({"GCT_BENCH_NVIDIA_BIN": str(theirs)}, scratch) == (
        theirs / "nvidia-container-runtime.cdi",
        f"NVIDIA's runtime: {theirs}/nvidia-container-runtime.cdi (NVIDIA Container Runtime version 1.17.8)")
