"""make demo: the main job end to end. Grows with each part of the project."""
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def step(title: str, *cmd: str) -> None:
    print(f"\n==> {title}\n$ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)


def main() -> int:
    step("nvidia-ctk is installed", str(BIN / "nvidia-ctk"), "--version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
