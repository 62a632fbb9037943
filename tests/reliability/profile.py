"""How much the reliability suite does: the full profile (`make reliability`, the counts of issue 15)
or the short one every `make test` runs (the same checks, scaled down to a few minutes on 2 cores).

GCT_RELIABILITY=full picks the full profile; anything else, or nothing, the short one.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

PROFILE_ENV = "GCT_RELIABILITY"


@dataclass(frozen=True)
class Profile:
    name: str
    containers_at_once: int      # GPU containers created at the same time through the shim, per mode
    generates_at_once: int       # `nvidia-ctk cdi generate` runs writing one file at the same time
    sequential_rshared: int      # containers one after another with / rshared
    soak_lifecycles: int         # create/start/wait/delete cycles of the soak
    soak_samples: int            # how often the soak measures fds, mounts and files
    fuzz_cases: int              # hypothesis examples per parser
    fuzz_call_timeout: float     # seconds one parser call may take before it counts as a hang
    hook_kill_until_ms: int      # the prestart hook is SIGKILLed after 0, step, 2 step ... this many ms
    hook_kill_step_ms: int
    cache_damages: int           # damaged copies of a create cache entry started from, per mode


FULL = Profile("full", containers_at_once=32, generates_at_once=32, sequential_rshared=50, soak_lifecycles=500,
               soak_samples=10, fuzz_cases=10_000, fuzz_call_timeout=5.0, hook_kill_until_ms=250,
               hook_kill_step_ms=10, cache_damages=10_000)
SHORT = Profile("short", containers_at_once=8, generates_at_once=8, sequential_rshared=10, soak_lifecycles=36,
                soak_samples=3, fuzz_cases=300, fuzz_call_timeout=5.0, hook_kill_until_ms=200,
                hook_kill_step_ms=40, cache_damages=12)


def current() -> Profile:
    return FULL if os.environ.get(PROFILE_ENV) == "full" else SHORT
