"""The shim's log, without the logging package (it costs milliseconds to import on every create).

Two destinations, both in runc's format (runtime_shim.errors.runc_log_line):
- the debug log of the config (`nvidia-container-runtime.debug`, at `log-level`; /dev/null = none);
- runc's `--log` file for warnings, where engines look (errors are written there by main.report).
Records of the cdi package (which uses `logging` only when something is worth saying) reach the debug
log too when one is configured: then `logging` is imported and bridged here.

Never stderr: for `create` the engine hands the runtime the container's own stdio (containerd's shim
passes the container's FIFOs to runc), so a line there lands in the container's output and logs. The
shim's Python side replaces sys.stderr with warning_stream() (main.main): whatever a library writes
there (logging's last-resort handler for a record logged before the bridge exists, e.g. a config
warning while config.toml is read) becomes a warning here. Records that arrive before configure()
(which needs the config for the debug log) are held and written once it runs. Only the one error line
of a failure goes to the real stderr (main.report), as NVIDIA's runtime does, and to runc's log.
"""
from __future__ import annotations

import sys

from runtime_shim.errors import append_line, runc_log_line

DEBUG, INFO, WARNING, ERROR, FATAL = 10, 20, 30, 40, 50
LEVELS = {"trace": DEBUG, "debug": DEBUG, "info": INFO, "warn": WARNING, "warning": WARNING, "error": ERROR,
          "fatal": FATAL, "panic": FATAL}
NAMES = {DEBUG: "debug", INFO: "info", WARNING: "warning", ERROR: "error", FATAL: "fatal"}


class ShimLog:
    def __init__(self) -> None:
        self.program = "nvidia-container-runtime"
        self.level = INFO
        self.debug_path: str | None = None
        self.runc_path: str | None = None
        self.runc_format = "text"
        self.held: list[tuple[int, str]] | None = None   # records before configure(); None: not holding
        self.warned = False   # a warning (or worse) was logged: such a create is not cached (create_cache)

    def hold(self, program: str) -> None:
        """Keep records until configure() says where they go (main.main, before the config is read)."""
        self.program, self.held = program, []

    def configure(self, program: str, level: str, debug_path: str | None, runc_path: str | None,
                  runc_format: str) -> None:
        self.program, self.level = program, LEVELS.get(level, INFO)
        self.debug_path = debug_path if debug_path and debug_path != "/dev/null" else None
        self.runc_path, self.runc_format = runc_path or None, runc_format
        if self.debug_path or "logging" in sys.modules:
            self._bridge_logging()
        self.release()

    def release(self) -> None:
        """Write the held records where they go now (runc's log at least, once the argv is known)."""
        held, self.held = self.held, None
        for level, text in held or ():
            self.emit(level, text)

    @property
    def active(self) -> bool:
        return self.debug_path is not None

    def emit(self, level: int, message: str) -> None:
        self.warned = self.warned or level >= WARNING
        if self.held is not None:
            self.held.append((level, message))
            return
        level = max(DEBUG, min(FATAL, level - level % 10))
        text = f"{self.program}: {message}"
        if self.debug_path and level >= self.level:
            append_line(self.debug_path, runc_log_line(text, NAMES[level], "text"))
        if self.runc_path and WARNING <= level < ERROR:
            append_line(self.runc_path, runc_log_line(text, NAMES[level], self.runc_format))

    def debug(self, message: str, *args) -> None:
        if self.debug_path and self.level <= DEBUG:
            self.emit(DEBUG, message % args if args else message)

    def info(self, message: str, *args) -> None:
        if self.debug_path and self.level <= INFO:
            self.emit(INFO, message % args if args else message)

    def warning(self, message: str, *args) -> None:
        self.emit(WARNING, message % args if args else message)

    def error(self, message: str, *args) -> None:
        if self.debug_path:
            self.emit(ERROR, message % args if args else message)

    def exception_details(self) -> None:
        """The traceback of the exception being handled, into the debug log only."""
        if self.debug_path:
            import traceback

            self.emit(DEBUG, "unexpected failure: " + traceback.format_exc().replace("\n", " | "))

    def _bridge_logging(self) -> None:
        import logging

        shim = self

        class _Forward(logging.Handler):
            gct_shim_bridge = True

            def emit(self, record: logging.LogRecord) -> None:
                shim.emit(record.levelno, record.getMessage())

        root = logging.getLogger()
        if not any(getattr(h, "gct_shim_bridge", False) for h in root.handlers):
            root.addHandler(_Forward())
        root.setLevel(self.level if self.debug_path else WARNING)


class _WarningStream:
    """A stand-in for sys.stderr: each line written becomes a warning of the shim's log."""

    def __init__(self, shim: ShimLog) -> None:
        self.shim, self.partial = shim, ""

    def write(self, text: str) -> int:
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            if line.strip():
                self.shim.emit(WARNING, line)
        return len(text)

    def flush(self) -> None:
        pass


def warning_stream() -> _WarningStream:
    return _WarningStream(log)


log = ShimLog()
