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
    step("a CDI spec for it (one createContainer hook: nvidia-cdi-hook)", str(BIN / "nvidia-ctk"), "cdi", "generate",
         "--driver-root", str(SIMULATED_HOST), "--output", str(spec_dir / "nvidia.yaml"))
    step("the device names it gives containers", str(BIN / "nvidia-ctk"), "cdi", "list", "--spec-dir", str(spec_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
