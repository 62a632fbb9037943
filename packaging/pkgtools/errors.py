"""The one error type of the package build: what failed and where, printed as one line."""
from __future__ import annotations

import subprocess


class BuildError(Exception):
    def __init__(self, what: str, where: str | None = None):
        super().__init__(what)
        self.what = what
        self.where = where

    def __str__(self) -> str:
        return f"{self.what} ({self.where})" if self.where else self.what


def run(argv: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    """Run argv; on failure raise BuildError with the last lines of its output."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    try:
        done = subprocess.run(argv, **kwargs)
    except FileNotFoundError:
        raise BuildError(f"{what}: {argv[0]} is not installed", argv[0]) from None
    if done.returncode != 0:
        output = ((done.stderr or "") + (done.stdout or "")).strip().splitlines() if kwargs["capture_output"] else []
        tail = "\n  ".join(output[-15:]) or f"exit status {done.returncode}"
        raise BuildError(f"{what} failed:\n  {tail}", " ".join(argv[:3]))
    return done
