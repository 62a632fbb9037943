"""The errors cdi raises, and how every program of the project writes a message line.

Each error carries `what` went wrong and `where` (a file, a variable, a device id), so every program
can print the project's one-line form `<program>: error: <what> (<where>)`. Messages name outside
values (paths from a container's state, config.toml keys, spec contents), so the line is built here,
once for all programs: `message_line` escapes whatever could end the line or reach the terminal as a
control, and `what_where` quotes a `where` that is not plain printable text.
"""
from __future__ import annotations


# How long a value in a message may be (characters, after escaping): a number (a run of ASCII digits:
# no id, size or version has more), any other run without a space (a path's worth), the whole text.
MAX_DIGITS = 32
MAX_WORD = 256
MAX_TEXT = 4096


def printable(text: str) -> str:
    """text as one plain, bounded line: every character str.isprintable() refuses (line breaks, C0 and
    C1 controls such as ESC and CSI, bidi overrides, the surrogate standing for a byte that is not
    UTF-8) written as repr() writes it (\\n, \\x1b, \\u202e, \\udcff), then cut to length (bounded). An
    outside value in a message can then neither forge a second line, nor send the terminal a control
    sequence, nor fill the screen (a 150-digit number, a megabyte of path)."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return bounded(text)


def _cut(run: str, limit: int) -> str:
    """run cut to limit characters around "...", keeping its start and its last quarter."""
    if len(run) <= limit:
        return run
    tail = limit // 4
    return run[:limit - 3 - tail] + "..." + run[-tail:]


def _cut_numbers(word: str) -> str:
    """Every run of more than MAX_DIGITS ASCII digits in word cut to MAX_DIGITS."""
    parts, start, i = [], 0, 0
    while i < len(word):
        if "0" <= word[i] <= "9":
            end = i
            while end < len(word) and "0" <= word[end] <= "9":
                end += 1
            if end - i > MAX_DIGITS:
                parts += [word[start:i], _cut(word[i:end], MAX_DIGITS)]
                start = end
            i = end
        else:
            i += 1
    return "".join(parts) + word[start:] if parts else word


def bounded(text: str) -> str:
    """text with each number cut to MAX_DIGITS characters, each other run without a space to MAX_WORD,
    and the whole to MAX_TEXT (message.c's hook_bound cuts the same, to the character)."""
    if len(text) <= MAX_DIGITS:
        return text
    text = " ".join(_cut(_cut_numbers(word), MAX_WORD) if len(word) > MAX_DIGITS else word
                    for word in text.split(" "))
    return _cut(text, MAX_TEXT)


def shown(value: object) -> str:
    """An outside value as a message names it: as it is when it is plain printable text, else quoted
    and escaped as repr() does ('/run/a\\nb'), so that what it holds is visible and unambiguous."""
    if isinstance(value, bytes):
        import os

        value = os.fsdecode(value)
    text = str(value)
    return text if text and text.isprintable() else repr(text)


def what_where(what: str, where: object = None) -> str:
    """The project's `<what> (<where>)`; `where` shown with `shown`."""
    return f"{what} ({shown(where)})" if where else what


def message_line(program: str, level: str, text: str) -> str:
    """`<program>: <level>: <text>` (level: error, warning), always exactly one printable line of
    bounded length (printable)."""
    return f"{program}: {level}: {printable(text)}"


# How a program writes an error that ends it from outside its main flow (cdi.nvml's watchdog, while the
# main thread is stuck in the driver): None is one line on stderr, named after the program (argv[0]).
# A program that reports errors in more places sets its own (the shim: also runc's --log file).
fatal_reporter = None


def report_fatal(error: Exception) -> None:
    """Report error (fatal_reporter, else one line on stderr) and end the process with status 1, now:
    no cleanup runs, the main thread may be inside a call that never returns."""
    import os
    import sys

    try:
        if fatal_reporter is not None:
            fatal_reporter(error)
        else:
            program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "gpu-container-toolkit"
            os.write(2, (message_line(program, "error", str(error)) + "\n").encode("utf-8", "replace"))
    finally:
        os._exit(1)


class CdiError(ValueError):
    def __init__(self, what: str, where: str | None = None):
        self.what = what
        self.where = where
        super().__init__(what_where(what, where))


class InvalidNameError(CdiError):
    """A CDI kind or device name that breaks the naming rules; the message says which rule."""


class SpecError(CdiError):
    """A CDI spec that cannot be read, parsed or validated."""


class ConfigError(CdiError):
    """A config.toml that cannot be read or holds a value of the wrong type."""


class RequestError(CdiError):
    """A container's GPU request that is malformed, refused or names something that does not exist."""


class RequirementError(CdiError):
    """An NVIDIA_REQUIRE_* constraint that is malformed or not met."""
