"""make demo: the main job end to end. Grows with each part of the project."""
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def step(title: str, *cmd: str) -> None:
    print(f"\n==> {title}\n$ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)


# The simulated GPU host the demo steps share (out/ is git-ignored; rebuilt on every run).
SIMULATED_HOST = Path(__file__).resolve().parent.parent / "out" / "simulated-host"


def main() -> int:
    step("nvidia-ctk is installed", str(BIN / "nvidia-ctk"), "--version")
    step("a simulated GPU host: 2 x A100, MIG on GPU 1 (3g.20gb + 1g.5gb)", str(BIN / "nvidia-ctk"), "simulate",
         "create", str(SIMULATED_HOST), "--gpus", "2", "--mig", "1=3g.20gb,1g.5gb", "--force")
    step("what NVML reports for it", str(BIN / "nvidia-ctk"), "info", "--driver-root", str(SIMULATED_HOST))
    step("its nvidia-smi", str(SIMULATED_HOST / "usr/bin/nvidia-smi"), "-L")
    spec_dir = SIMULATED_HOST.parent / "cdi"
    spec_dir.mkdir(exist_ok=True)
    step("a CDI spec for it (one createRuntime hook: nvidia-cdi-hook)", str(BIN / "nvidia-ctk"), "cdi", "generate",
         "--driver-root", str(SIMULATED_HOST), "--output", str(spec_dir / "nvidia.yaml"))
    step("the device names it gives containers", str(BIN / "nvidia-ctk"), "cdi", "list", "--spec-dir", str(spec_dir))
    # GPU 1 is in MIG mode: the spec has its MIG devices, not the whole GPU (as NVIDIA's specs)
    run_through_shim(spec_dir, "GPU 0", "NVIDIA_VISIBLE_DEVICES=0")
    run_through_shim(spec_dir, "MIG device 1:1 (1g.5gb)", "NVIDIA_VISIBLE_DEVICES=1:1")
    run_through_shim(spec_dir, "all (GPU 0 and GPU 1's two MIG devices)", "NVIDIA_VISIBLE_DEVICES=all")
    return 0


def run_through_shim(spec_dir: Path, what: str, request: str) -> None:
    """A real container (runc behind nvidia-container-runtime in cdi mode; create, start, state, delete
    all through the shim) that asks for `what` and prints its own `nvidia-smi -L`."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's test helpers
    from tests.e2e.bundle import make_bundle
    from tests.e2e.shim_host import GpuHost, ShimLifecycle, shim_env, write_shim_config

    work = SIMULATED_HOST.parent / "shim-demo"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir()
    config = write_shim_config(work / "config.toml", GpuHost(SIMULATED_HOST, spec_dir, [], {}, {}))
    bundle = make_bundle(work / "bundle", ["nvidia-smi", "-L"], env=[request], glibc=True)
    print(f"\n==> a container asking for {what} through the runtime shim\n"
          f"$ {request} nvidia-container-runtime create/start/delete (config {config}), inside: nvidia-smi -L",
          flush=True)
    code, output, stderr = ShimLifecycle(shim_env(config, work / "cache"), work / "state").run(bundle)
    if code != 0:
        raise SystemExit(f"demo: error: the container did not start: {stderr.strip()}")
    print(output, end="", flush=True)


if __name__ == "__main__":
    sys.exit(main())
