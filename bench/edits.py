"""Where a fresh rootfs's time goes (issue 25): plain runc alone on variants of the cdi row's config.json.

The config.json the shim writes in cdi mode for one GPU (bench lifecycle's "runc on the cdi row's
config.json") is taken apart, each variant one row, all run by runc alone (no shim), round-robin
(bench.harness.time_rounds):
  - plain: the config.json before the shim's edits;
  - + devices: with the edits' device nodes (and their device cgroup rules);
  - + mounts: with the edits' bind mounts (their targets are made in the rootfs);
  - + mounts + hook links: and the nvidia-cdi-hook entry with create-symlinks only;
  - + mounts + hook without ldconfig: the whole entry but update-ldcache (and enable-cuda-compat, which
    needs it);
  - + mounts + whole hook: the entry as the spec has it;
  - all edits: the config.json the shim wrote.
Every row is taken on a fresh rootfs (bench.fresh_host: a new bundle dir and a new copy of the image
each run, not timed) and again with its rootfs reused ("restart:" rows), in the same rounds. The host
(config, spec, caches) is a fresh install's in a private mount namespace (bench.fresh_host.FreshHost).
"""
from __future__ import annotations

import copy
import json
import tempfile
from functools import partial
from pathlib import Path

from bench.cdi_hook import SUBCOMMANDS, _steps
from bench.fresh_host import FreshHost, runtime_env
from bench.gpu_lifecycle import GPU_ENV, SHIM, Row, _bundle, _simulated_host
from bench.harness import load_line, report, time_rounds
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.rootfs import make_rootfs

# update-ldcache and what the hook ignores without it (with a warning on every run)
NEEDS_LDCONFIG = {"update-ldcache", "enable-cuda-compat"}
LABELS = ["plain config.json", "+ devices", "+ mounts", "+ mounts + hook links", "+ mounts + hook without ldconfig",
          "+ mounts + whole hook", "all edits"]


def _with_hook(config: dict, entry: dict, keep: set[str] | None) -> dict:
    """config with entry as its only createRuntime hook, its chain cut to the subcommands in keep
    (None: all of it)."""
    entry = copy.deepcopy(entry)
    if keep is not None:
        entry["args"] = entry["args"][:1] + _steps(entry["args"][1:], keep)
    config["hooks"] = {"createRuntime": [entry]}
    return config


def variants(plain: dict, edited: dict) -> list[dict]:
    """The configs of LABELS, in that order, from the config.json before and after the shim's edits."""
    (entry,) = edited["hooks"]["createRuntime"]
    subcommands = set(SUBCOMMANDS) & set(entry["args"])
    devices = copy.deepcopy(plain)
    devices["linux"]["devices"] = edited["linux"]["devices"]
    devices["linux"]["resources"] = edited["linux"]["resources"]

    def mounts() -> dict:
        config = copy.deepcopy(plain)
        config["mounts"] = edited["mounts"]
        return config

    return [plain, devices, mounts(), _with_hook(mounts(), entry, {"create-symlinks"}),
            _with_hook(mounts(), entry, subcommands - NEEDS_LDCONFIG), _with_hook(mounts(), entry, None), edited]


def run(runs: int) -> str:
    ensure_hugetlb_on_v1()
    load_before = load_line("before")
    with tempfile.TemporaryDirectory(prefix="bench-edits-") as tmp:
        workdir = Path(tmp)
        driver_root = _simulated_host(workdir)
        image = make_rootfs(workdir / "image-glibc", glibc=True)
        env = runtime_env()
        host = FreshHost("edits", workdir, driver_root)
        try:
            # one untimed run of nvidia-container-runtime.cdi: the config.json it leaves is the cdi row's
            probe = _bundle(workdir / "probe", image, GPU_ENV)
            plain = json.loads((probe / "config.json").read_text())
            (workdir / "plain.json").write_text(json.dumps(plain))
            host.lifecycle([SHIM + ".cdi"], probe, workdir / "plain.json", env)
            edited = json.loads((probe / "config.json").read_text())
            if edited == plain or "hooks" not in edited:
                raise RuntimeError("nvidia-container-runtime.cdi left config.json without the GPU's edits")
            rows = []
            for n, (label, config) in enumerate(zip(LABELS, variants(plain, edited))):
                (workdir / f"variant-{n}.json").write_text(json.dumps(config))
                rows.append(Row(f"v{n}", label, "edits", ["runc"], _bundle(workdir / f"v{n}", image, GPU_ENV),
                                workdir / f"variant-{n}.json", env, image))
            rows += [row.restart() for row in rows]
            timed = time_rounds([(row.label, partial(host.lifecycle, row.runtime, row.bundle, row.config, row.env,
                                                     row.rootfs)) for row in rows], runs)
        finally:
            host.close()
    half = len(LABELS)
    return "\n".join([
        report("runc alone on variants of the cdi row's config.json, on a fresh rootfs (a new bundle dir and "
               "rootfs copy each run, not timed), all rows round-robin; paired: the median of each round's "
               "ratio to that round's plain row", timed[:half], timed[0], with_paired=True),
        report("the same on a reused rootfs (a restarted container), in the same rounds", timed[half:],
               timed[half], with_paired=True),
        load_before, load_line("after")])
