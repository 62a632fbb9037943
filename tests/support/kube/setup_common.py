"""What the set-up steps share: their progress and error lines, and one lock on the cache."""
from __future__ import annotations

import contextlib
import fcntl
import sys

from tests.support.kube import paths

PROGRAM = "kube-setup"


class SetupError(Exception):
    """A set-up step that cannot be done: `<what> (<where>)`."""

    def __init__(self, what: str, where: str):
        super().__init__(f"{what} ({where})")


def say(text: str) -> None:
    print(f"{PROGRAM}: {text}", flush=True)


@contextlib.contextmanager
def cache_lock(name: str):
    """Held while one part of the cache is filled, so two runs (two checkouts, `make -j`) never build the
    same part at once."""
    root = paths.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another run that is filling {root} ({name})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
