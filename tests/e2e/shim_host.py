"""A simulated GPU host with a generated CDI spec, and the runtime shim running containers on it.

Used by the shim's e2e tests, its benchmark and the demo: `build_gpu_host(dir)` runs the real
`nvidia-ctk simulate create` (2 GPUs, MIG on GPU 1 with two 1g.5gb devices) and `nvidia-ctk cdi
generate` into a private spec dir; `write_shim_config` points the shim at both (through
NVIDIA_CTK_CONFIG_FILE_PATH, nothing under /etc); `ShimLifecycle` runs create/start/wait/delete with
every call through the shim and returns what the container printed.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
SHIM = BIN / "nvidia-container-runtime"
NVIDIA_CTK = BIN / "nvidia-ctk"


@dataclass
class GpuHost:
    root: Path
    spec_dir: Path
    gpu_uuids: list[str]
    mig_uuids: dict[str, str]        # "1:0" -> MIG-...
    mig_caps: dict[str, tuple[int, int]]  # "1:0" -> (gi cap minor, ci cap minor)


def build_gpu_host(workdir: Path) -> GpuHost:
    root, spec_dir = workdir / "gpu-host", workdir / "cdi"
    spec_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(NVIDIA_CTK), "simulate", "create", str(root), "--gpus", "2", "--mig", "1=1g.5gb,1g.5gb"],
                   check=True, capture_output=True, text=True)
    subprocess.run([str(NVIDIA_CTK), "cdi", "generate", "--driver-root", str(root), "-o", str(spec_dir / "nvidia.json")],
                   check=True, capture_output=True, text=True)
    inventory = json.loads((root / ".nvidia-simulated-host.json").read_text())["inventory"]
    gpus = inventory["gpus"]
    migs = {f"{g['index']}:{m['index']}": m for g in gpus for m in g["mig_devices"]}
    return GpuHost(root, spec_dir, [g["uuid"] for g in gpus], {k: m["uuid"] for k, m in migs.items()},
                   {k: (m["gi_cap_minor"], m["ci_cap_minor"]) for k, m in migs.items()})


def write_shim_config(path: Path, host: GpuHost, runtime: str = "runc", mode: str = "cdi",
                      debug_log: Path | None = None) -> Path:
    lines = ["[nvidia-container-cli]", f'root = "{host.root}"', "[nvidia-container-runtime]",
             f'mode = "{mode}"', f'runtimes = ["{runtime}"]']
    if debug_log:
        lines += [f'debug = "{debug_log}"', 'log-level = "debug"']
    lines += ["[nvidia-container-runtime.modes.cdi]", f'spec-dirs = ["{host.spec_dir}"]']
    path.write_text("\n".join(lines) + "\n")
    return path


def shim_env(config: Path, cache_dir: Path) -> dict[str, str]:
    # the system dirs only: the launcher's cache notes PATH dirs' mtimes (tool managers' shim dirs change often)
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_CACHE_DIR": str(cache_dir)}


@dataclass
class ShimLifecycle:
    """create, start, wait (polling `state` through the shim), delete; every call through the shim."""
    env: dict[str, str]
    state_root: Path
    shim: Path = SHIM
    calls: list[list[str]] = field(default_factory=list)

    def _call(self, *args: str, stdout=None) -> subprocess.CompletedProcess:
        # files, never pipes: the container's init inherits create's stdio, so reading a pipe to its end
        # would wait for the container to exit, which needs `start`
        argv = [str(self.shim), "--root", str(self.state_root), *args]
        self.calls.append(argv)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            result = subprocess.run(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=stdout or out,
                                    stderr=err, timeout=60)
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(argv, result.returncode, out.read().decode(errors="replace"),
                                               err.read().decode(errors="replace"))

    def run(self, bundle: Path, timeout: float = 30) -> tuple[int, str, str]:
        """(exit code of create or 0, container output, create's stderr)."""
        cid = "gct-shim-" + uuid.uuid4().hex[:10]
        out_path = bundle / f"{cid}.out"
        created = None
        try:
            with open(out_path, "w") as out:
                created = self._call("--log", str(bundle / "log.json"), "--log-format", "json", "create",
                                     "--bundle", str(bundle), "--pid-file", str(bundle / f"{cid}.pid"), cid,
                                     stdout=out)
        finally:
            if created is None:  # create timed out or was interrupted: a half-made container may wait for start
                self._delete(cid)
        if created.returncode != 0:
            return created.returncode, "", created.stderr
        try:
            started = self._call("start", cid)
            assert started.returncode == 0, started.stderr
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                state = self._call("state", cid)
                assert state.returncode == 0, state.stderr
                if json.loads(state.stdout)["status"] == "stopped":
                    break
                time.sleep(0.02)
            else:
                raise AssertionError(f"container {cid} still running after {timeout}s")
        finally:
            deleted = self._delete(cid)
            assert deleted.returncode == 0, deleted.stderr
        return 0, out_path.read_text(), created.stderr

    def _delete(self, cid: str) -> subprocess.CompletedProcess:
        """`delete --force` through the shim; should that fail (a shim under test may be broken), the
        container is still removed with the runtimes themselves, and the shim's failure returned."""
        deleted = self._call("delete", "--force", cid)
        if deleted.returncode != 0:
            for runtime in ("runc", "crun"):
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    subprocess.run([runtime, "--root", str(self.state_root), "delete", "--force", cid],
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        return deleted


# What a container prints about its GPUs: device nodes, NVIDIA libraries, nvidia-smi -L.
GPU_REPORT = ("cd /dev; echo DEV $(ls -d nvidia* nvidia-caps/* 2>/dev/null); "
              "echo LIBS $(ls /usr/lib/x86_64-linux-gnu 2>/dev/null | grep -E 'libnvidia|libcuda' | tr '\\n' ' '); "
              "if command -v nvidia-smi >/dev/null; then nvidia-smi -L; else echo NO-NVIDIA-SMI; fi")


def parse_gpu_report(output: str) -> dict:
    lines = output.splitlines()
    dev = next(line for line in lines if line.startswith("DEV")).split()[1:]
    libs = next(line for line in lines if line.startswith("LIBS")).split()[1:]
    smi = [line for line in lines if not line.startswith(("DEV", "LIBS"))]
    return {"dev": sorted(dev), "libs": libs, "smi": smi}
