"""Files the admin commands write."""
from __future__ import annotations

import os


def make_parent_dirs(path: str) -> None:
    """The missing folders above path, each mode 0755 whatever the umask: /etc/cdi does not exist on a
    fresh host, and engines that read specs unprivileged (rootless podman) must be able to list it."""
    missing = []
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for folder in reversed(missing):
        os.mkdir(folder, 0o755)
        os.chmod(folder, 0o755)
