"""Property-based fuzzing of the parsers (hypothesis), with what the report needs counted.

`fuzz(target, strategy, profile, figures)` feeds `profile.fuzz_cases` inputs to target. A call may
return (True: the input was accepted; False: refused the way the parser reports problems, e.g. a list
of them) or raise one of the project's error types (the one-line errors: cdi.errors.CdiError and its
subclasses, hook.cdi_hook.HookError: refused); anything else is a traceback a user would see, and fails
the test with the input (in the full profile, the smallest one hypothesis finds). A call that runs
longer than profile.fuzz_call_timeout is stopped by SIGALRM and fails the test as a hang.

The examples are derandomized (a fixed seed per test: CI is repeatable), nothing is stored between runs
(no .hypothesis directory), and hypothesis' per-example deadline is off: the timeout above is the one
that counts, since machines this runs on are busy.
"""
from __future__ import annotations

import signal
import time

from hypothesis import HealthCheck, Phase, given, settings

from cdi.errors import CdiError


class Hang(BaseException):
    """A parser call that did not return in time (BaseException: no `except Exception` swallows it)."""


def one_line_errors() -> tuple[type[BaseException], ...]:
    from hook.cdi_hook import HookError

    return (CdiError, HookError)


def _alarm(signum, frame):
    raise Hang()


def fuzz(target, strategy, profile, figures, allowed: tuple[type[BaseException], ...] | None = None) -> None:
    """Run target on profile.fuzz_cases examples of strategy; figures gets cases (shrinking included),
    accepted and refused inputs, tracebacks, hangs, the slowest call and the time taken."""
    allowed = allowed or one_line_errors()
    counts = {"cases": 0, "accepted": 0, "refused": 0, "tracebacks": 0, "hangs": 0, "slowest_call_ms": 0.0}
    started = time.monotonic()

    # the short profile (CI) reports a failing input as found: shrinking it can take longer than the run
    phases = [p for p in Phase if profile.name == "full" or p != Phase.shrink]

    @settings(max_examples=profile.fuzz_cases, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), print_blob=False, phases=phases)
    @given(strategy)
    def check(value):
        counts["cases"] += 1
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, profile.fuzz_call_timeout)
        call_started = time.perf_counter()
        try:
            counts["accepted" if target(value) else "refused"] += 1
        except allowed:
            counts["refused"] += 1
        except Hang:
            counts["hangs"] += 1
            raise AssertionError(f"hang: no answer in {profile.fuzz_call_timeout} s") from None
        except Exception:
            counts["tracebacks"] += 1
            raise
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            counts["slowest_call_ms"] = max(counts["slowest_call_ms"],
                                            round((time.perf_counter() - call_started) * 1000, 1))

    try:
        check()
    finally:
        figures.update(counts, seconds=round(time.monotonic() - started, 1))
    # hypothesis stops early when a strategy has fewer distinct inputs than asked: never silently
    assert counts["cases"] >= profile.fuzz_cases, f"only {counts['cases']} cases ran"
