"""Runs the reliability suite and writes docs/RELIABILITY.md from what it measured.

    python -m tests.reliability.report [--profile full|short] [--output docs/RELIABILITY.md]
    python -m tests.reliability.report --from FIGURES.jsonl --output ...   (render a kept run, no tests)

`make reliability-report` is the first form with the full profile. The suite runs in a child pytest with
GCT_RELIABILITY (the profile) and GCT_RELIABILITY_FIGURES (a JSON-lines file each test appends its
figures and outcome to, tests.reliability.figures); the page is rendered from that file alone.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.reliability.figures import FIGURES_ENV, read
from tests.reliability.profile import FULL, PROFILE_ENV, SHORT

ROOT = Path(__file__).resolve().parents[2]

# module -> (section title, what it checks)
SECTIONS = {
    "test_concurrency": ("Concurrency", "GPU containers created at the same moment through the shim, every runtime "
                         "call through it, in each mode; `nvidia-ctk cdi generate` runs writing one file while "
                         "readers parse and validate it."),
    "test_sequential": ("Mount leaks and soak", "Containers one after another in a private mount namespace whose "
                        "`/` is rshared (as systemd makes it), counting that namespace's mounts; then many full "
                        "lifecycles, sampling file descriptors, mounts and files as they go."),
    "test_faults": ("Faults", "Each fault injected for real; the check is the one error line and that everything "
                    "the program was given is as it was before."),
    "test_fuzz_parsers": ("Property-based fuzzing", "hypothesis, derandomized (fixed seeds), no per-example "
                          "deadline; a call longer than the per-call timeout is a hang. Cases count every call, "
                          "shrinking included. Refused: the input was reported as bad (one of the project's "
                          "one-line errors, or a listed problem); a traceback is any other exception."),
}


def run_suite(profile: str, figures_path: str, extra: list[str]) -> int:
    env = dict(os.environ, **{PROFILE_ENV: profile, FIGURES_ENV: figures_path})
    argv = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "tests/reliability", *extra]
    return subprocess.run(argv, cwd=ROOT, env=env).returncode


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items()) or "none"
    return str(value)


def _result(entry: dict) -> str:
    outcome = entry.get("outcome", "not run")
    return {"passed": "pass", "failed": "**FAIL**", "xfailed": "known defect (xfail)",
            "xpassed": "pass (marked xfail)", "skipped": "skipped"}.get(outcome, outcome)


def _name(test_id: str) -> str:
    return test_id.split("::", 1)[1].removeprefix("test_").replace("_", " ")


def render(tests: dict[str, dict], profile: str, total_seconds: float | None) -> str:
    counts = FULL if profile == "full" else SHORT
    lines = ["# Reliability", "",
             "What the reliability suite (`tests/reliability/`) measured on its last recorded run. Regenerate with "
             "`make reliability-report` (the full profile, then this page); `make reliability` runs the same "
             "checks without writing it, and every `make test` runs them with the short profile. Nothing here is "
             "typed by hand.", "",
             f"- profile: **{profile}** ({counts.containers_at_once} containers at once per mode, "
             f"{counts.generates_at_once} concurrent generates, {counts.sequential_rshared} sequential rshared "
             f"containers, {counts.soak_lifecycles} soak lifecycles, {counts.fuzz_cases} fuzz cases per parser)",
             f"- run: {datetime.date.today().isoformat()}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
             f"Python {platform.python_version()}" + (f", {total_seconds:.0f} s in all" if total_seconds else ""),
             f"- results: " + ", ".join(f"{sum(1 for t in tests.values() if _result(t) == r)} {r}"
                                         for r in ("pass", "**FAIL**", "known defect (xfail)",
                                                   "pass (marked xfail)", "skipped")
                                         if any(_result(t) == r for t in tests.values())), ""]
    for module, (title, what) in SECTIONS.items():
        mine = {test_id: entry for test_id, entry in tests.items() if f"/{module}.py::" in test_id}
        if not mine:
            continue
        lines += [f"## {title}", "", what, ""]
        if module == "test_fuzz_parsers":
            columns = ["cases", "accepted", "refused", "tracebacks", "hangs", "slowest_call_ms"]
            lines += ["| parser | cases | accepted | refused | tracebacks | hangs | slowest call (ms) | also | s | "
                      "result |", "|---|---|---|---|---|---|---|---|---|---|"]
            for test_id, entry in mine.items():
                f = entry.get("figures", {})
                also = "; ".join(f"{k.replace('_', ' ')}: {_value(v)}" for k, v in f.items()
                                 if k not in columns and k != "seconds")
                lines.append(f"| {_name(test_id)} | " + " | ".join(str(f.get(c, "-")) for c in columns) +
                             f" | {also or '-'} | {entry.get('seconds', '-')} | {_result(entry)} |")
        else:
            lines += ["| check | measured | s | result |", "|---|---|---|---|"]
            for test_id, entry in mine.items():
                measured = "; ".join(f"{k.replace('_', ' ')}: {_value(v)}" for k, v in entry.get("figures", {}).items())
                lines.append(f"| {_name(test_id)} | {measured or '-'} | {entry.get('seconds', '-')} | "
                             f"{_result(entry)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.report", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=["full", "short"], default="full")
    parser.add_argument("--output", default=str(ROOT / "docs" / "RELIABILITY.md"))
    parser.add_argument("--from", dest="source", help="render this figures file instead of running the suite")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (e.g. -k fuzz)")
    args = parser.parse_args(argv)
    code, seconds = 0, None
    if args.source:
        path = args.source
    else:
        fd, path = tempfile.mkstemp(prefix="gct-reliability-", suffix=".jsonl")
        os.close(fd)
        started = time.monotonic()
        code = run_suite(args.profile, path, args.pytest_args)
        seconds = time.monotonic() - started
    try:
        page = render(read(path), args.profile, seconds)
    finally:
        if not args.source:
            os.unlink(path)
    Path(args.output).write_text(page)
    print(f"wrote {args.output} (pytest exit {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())
