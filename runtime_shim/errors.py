"""The shim's own error, and how an error reaches the user: one line on stderr and, when the caller
gave runc a `--log` file, a line in runc's own log format there (containerd reads that file and
docker shows its last error message)."""
from __future__ import annotations

import os
import time

from cdi.errors import CdiError


class ShimError(CdiError):
    """Something the shim itself cannot do (no runtime, bundle unreadable...): what + where."""


def runc_log_line(message: str, level: str, log_format: str, now: float | None = None) -> str:
    """A line as runc's logrus writes it: JSON with --log-format json, logfmt otherwise."""
    import json   # only on the way out with an error

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    if log_format == "json":
        return json.dumps({"level": level, "msg": message, "time": stamp}) + "\n"
    return f'time="{stamp}" level={level} msg={json.dumps(message)}\n'


def append_line(path: str, line: str) -> None:
    """Append to a log file as runc does (created 0644 when missing); failures are ignored: the line
    has gone to stderr as well."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    except OSError:
        pass
    finally:
        os.close(fd)
