"""Manual pages and shell completion files, made at build time from the installed programs themselves.

collect() runs inside the build's namespace (venv_build), where the environment is at its final path
and its programs run: it records every program's `--help` (and each subcommand's: nvidia-ctk's from
the "Commands:" list click prints, the others' from SUBCOMMANDS) and click's completion scripts of
nvidia-ctk. man_page() turns one program's help texts into a page for section 1: NAME and a short
description from this module, then each help text verbatim, so the page says what `--help` says.

Not from --help: nvidia-container-runtime passes --help on to runc (as NVIDIA's runtime does), so its
page carries only the description below; nvidia-container-runtime.cdi and .legacy share its page.
"""
from __future__ import annotations

import gzip
import re
import subprocess
import time

# the one-line NAME of each program's page ("program - summary")
SUMMARIES = {
    "nvidia-container-runtime": "OCI runtime that gives containers NVIDIA GPUs, then runs runc or crun",
    "nvidia-container-runtime-hook": "OCI prestart hook that injects NVIDIA GPUs into a container",
    "nvidia-container-cli": "inject NVIDIA GPUs into a container; show the driver and the GPUs",
    "nvidia-cdi-hook": "the hook a CDI spec runs while a container is created",
    "nvidia-ctk": "NVIDIA Container Toolkit admin CLI",
    "nvidia-device-plugin": "NVIDIA device plugin for Kubernetes",
}
# a paragraph before the help text, where --help alone says too little
DESCRIPTIONS = {
    "nvidia-container-runtime": (
        "Container engines (Docker, containerd, podman) call nvidia-container-runtime exactly as they call "
        "runc, for every command of a container's life. On create and run, when the container asks for GPUs "
        "(NVIDIA_VISIBLE_DEVICES, or CDI devices in annotations), it adds the GPUs to the bundle's "
        "config.json; then, and for every other command, it runs the low-level runtime (runtimes in "
        "/etc/nvidia-container-runtime/config.toml: runc, crun or a path) with the same arguments. "
        "Every command and option is the low-level runtime's: see runc(8); --help prints the low-level "
        "runtime's help, --version this program's version and then the runtime's. "
        "The mode (mode in config.toml: auto, cdi, jit-cdi, legacy) picks how the GPUs are added; "
        "nvidia-container-runtime.cdi and nvidia-container-runtime.legacy force the cdi and the legacy "
        "mode whatever the config says."),
    "nvidia-container-runtime-hook": (
        "Run by the container engine (Docker for docker run --gpus, nvidia-container-runtime in legacy mode, "
        "podman through the hooks.d file of nvidia-ctk runtime configure --runtime=podman) with the "
        "container's OCI state on stdin: prestart injects the GPUs the container asks for."),
}
# pages of other packages named in SEE ALSO
SEE_ALSO = {"nvidia-container-runtime": (("runc", 8),)}
# programs whose help names subcommands that click does not list (argparse ones)
SUBCOMMANDS = {
    "nvidia-container-cli": ("info", "list", "configure"),
    "nvidia-device-plugin": ("labels",),
}
NO_HELP = {"nvidia-container-runtime"}   # its --help is the low-level runtime's
# Names that share another program's page (the same binary, a fixed mode).
ALIASES = {"nvidia-container-runtime.cdi": "nvidia-container-runtime",
           "nvidia-container-runtime.legacy": "nvidia-container-runtime"}
# The programs with click's completion (the others parse their arguments without click).
COMPLETION_PROGRAMS = ("nvidia-ctk",)
SHELLS = ("bash", "zsh", "fish")
# The environment the help texts are made in: a fixed width, so the page does not depend on the builder's
# terminal.
HELP_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "COLUMNS": "80", "TERM": "dumb"}


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/", env={**HELP_ENV, **(env or {})},
                          timeout=60)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def click_commands(help_text: str) -> list[str]:
    """The subcommand names of click's "Commands:" section."""
    _, found, rest = help_text.partition("\nCommands:\n")
    if not found:
        return []
    names = []
    for line in rest.splitlines():
        if not line.startswith("  "):
            break
        if m := re.match(r"  (\S+)", line):
            names.append(m[1])
    return names


def collect(bindir: str, programs: list[str]) -> dict:
    """{"help": {program: [[command line, help text], ...]}, "completion": {program: {shell: script}}}."""
    helps: dict[str, list[list[str]]] = {}
    for program in programs:
        if program in NO_HELP or program in ALIASES:
            continue
        path = f"{bindir}/{program}"
        pages: list[list[str]] = []
        pending = [[]]
        while pending:
            words = pending.pop(0)
            text = _run([path, *words, "--help"])
            pages.append([" ".join([program, *words]), text])
            pending.extend([*words, name] for name in click_commands(text))
        pages.extend([f"{program} {name}", _run([path, name, "--help"])] for name in SUBCOMMANDS.get(program, ()))
        helps[program] = pages
    completion = {}
    for program in COMPLETION_PROGRAMS:
        variable = "_" + re.sub(r"\W", "_", program).upper() + "_COMPLETE"
        completion[program] = {shell: _run([f"{bindir}/{program}"], {variable: f"{shell}_source"}) for shell in SHELLS}
    return {"help": helps, "completion": completion}


def escape(text: str) -> str:
    """One line of text as roff: backslashes and minus signs escaped, no leading control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def _paragraph(text: str) -> list[str]:
    return [escape(text)]


def _verbatim(text: str) -> list[str]:
    lines = [".nf"]
    for line in text.rstrip("\n").splitlines():
        lines.append(escape(line.rstrip()) if line.strip() else ".sp")
    lines.append(".fi")
    return lines


def man_page(program: str, helps: list[list[str]], version: str, epoch: int, package: str) -> str:
    """Section 1 page of program: NAME, DESCRIPTION, then every help text under its command line."""
    date = time.strftime("%Y-%m-%d", time.gmtime(epoch))
    lines = [f'.TH "{program.upper()}" "1" "{date}" "{package} {version}" "User Commands"',
             ".nh", ".SH NAME", f"{escape(program)} \\- {escape(SUMMARIES[program])}"]
    if program in DESCRIPTIONS:
        lines += [".SH DESCRIPTION", *_paragraph(DESCRIPTIONS[program])]
    if helps:
        lines += [".SH OPTIONS", *_paragraph(f"As {program} --help prints them:"), ".PP"]
        for command, text in helps:
            if command != program:
                lines.append(f'.SS "{escape(command)}"')
            lines += _verbatim(text)
    see_also = ", ".join(f"\\fB{escape(p)}\\fR({section})"
                         for p, section in sorted([*((p, 1) for p in SUMMARIES), *SEE_ALSO.get(program, ())])
                         if p != program)
    lines += [".SH SEE ALSO", see_also + ".",
              ".PP", escape(f"/usr/share/doc/{package}/README.md")]
    return "\n".join(lines) + "\n"


def gzipped(text: str) -> bytes:
    """gzip -9n: maximal compression (lintian), no name and no date (the same page, the same bytes)."""
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)
