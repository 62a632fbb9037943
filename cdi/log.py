"""Loggers that import `logging` only when a message can be shown.

Importing logging costs several milliseconds (it imports traceback, linecache, tokenize, weakref,
string, threading ...), and the prestart hook runs at every GPU container start with nobody
configuring logging. Discovery logs debug messages on ordinary paths (a missing firmware directory,
a binary that is not installed), which nobody sees unless a program turned logging on.

So a LazyLogger passes a debug or info message on only when logging is already imported: if it is
not, nobody has configured it, the root logger's level is still WARNING and the message would be
dropped anyway. Warnings and errors always go to logging (imported then), so an unconfigured program
still prints them through logging's last-resort handler, exactly as before.

Messages name outside values, so what reaches logging is one printable line (cdi.errors.printable),
whatever handler prints it; `one_line_formatter` gives the same guarantee to programs that log
through handlers of their own.
"""
from __future__ import annotations

import sys

from cdi.errors import printable

_configure_on_first_use = None


def configure_on_first_use(configure) -> None:
    """Have `configure()` (which sets logging up: handlers, level) run when a LazyLogger first hands a
    message to logging, not now: a command that logs nothing then never imports logging. Only for
    programs whose every message goes through LazyLoggers, at the default level (WARNING: debug and
    info messages are dropped while logging is not imported, as they would be by that level)."""
    global _configure_on_first_use
    _configure_on_first_use = configure


class LazyLogger:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def _logger(self):
        global _configure_on_first_use
        import logging

        if _configure_on_first_use is not None:
            configure, _configure_on_first_use = _configure_on_first_use, None
            configure()
        return logging.getLogger(self.name)

    # stacklevel=2: records name the caller, not this wrapper (for formats showing funcName/lineno)
    def debug(self, msg: str, *args: object) -> None:
        if "logging" in sys.modules:
            self._logger().debug(msg, *args, stacklevel=2)

    def info(self, msg: str, *args: object) -> None:
        if "logging" in sys.modules:
            self._logger().info(msg, *args, stacklevel=2)

    def warning(self, msg: str, *args: object) -> None:
        self._logger().warning("%s", printable(msg % args if args else msg), stacklevel=2)

    def error(self, msg: str, *args: object) -> None:
        self._logger().error("%s", printable(msg % args if args else msg), stacklevel=2)


def get_logger(name: str) -> LazyLogger:
    return LazyLogger(name)


def one_line_formatter(fmt: str):
    """A logging.Formatter whose message part is always one printable line (a traceback it appends
    stays as it is: it is ours, and shown only when debugging)."""
    import logging

    class OneLineFormatter(logging.Formatter):
        def formatMessage(self, record: logging.LogRecord) -> str:
            return printable(super().formatMessage(record))

    return OneLineFormatter(fmt)
