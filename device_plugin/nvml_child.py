"""NVML read in a child process with a deadline, for what `gct-nvml-inventory` does not print: the GPU
topology (GetPreferredAllocation) and the node-label facts (MIG attributes); and the health events, read
by a child that stays (`events`, device_plugin.health_child.ChildEventSource).

Why: a driver whose library hangs in a call (nvmlInit, a topology call) or crashes (SIGSEGV) must not
hang or kill the plugin. In this process a hang could only be bounded by ending the whole program
(cdi.nvml's watchdog), and a crash would end it with no line at all. Here the child is killed at the
deadline (NVIDIA_CTK_NVML_TIMEOUT, default 60 s) and either case is one NvmlError line naming what was
being read; the plugin then serves without it (unknown topology, no labels written).

    python -I -S -c '<sys.path of the plugin>; nvml_child.main' WHAT DRIVER_ROOT   (child_argv; stdin:
    the pickled arguments)

The child writes the pickled answer on stdout, or one error line on stderr and exits 1. Only this
module's own child is unpickled: it is the same program, started here.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys

from cdi.errors import CdiError


def _topology(driver_root: str, gpu_indices: list[int]):
    from cdi.nvml_topology import read_links

    return read_links(driver_root, gpu_indices)


def _label_facts(driver_root: str, machine_type_file: str, inventory):
    from device_plugin.labels import read_facts

    return read_facts(driver_root, machine_type_file, inventory)


READERS = {"topology": (_topology, "the GPU topology"), "label-facts": (_label_facts, "the node-label facts")}


def child_argv(what: str, driver_root: str) -> list[str]:
    """The child's command line: this interpreter, isolated (-I: no PYTHONPATH, user site or current folder
    on its path, so nothing in the folder the plugin runs from is imported; -S: no site, as the launchers
    start it), given this process's own import path, so it finds this module however the toolkit is
    installed."""
    boot = (f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
            "from device_plugin.nvml_child import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-I", "-S", "-c", boot, what, driver_root]


class ChildRead:
    """One reader started in its child: `result()` waits for its answer (by the deadline)."""

    def __init__(self, what: str, driver_root: str, *args, timeout: float | None = None):
        from cdi.nvml import nvml_timeout

        self.what, self.driver_root = what, driver_root
        self.timeout = nvml_timeout() if timeout is None else timeout
        # a fresh interpreter, not a fork: the plugin has gRPC's threads, which a fork does not carry over
        self.process = subprocess.Popen(child_argv(what, driver_root),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        close_fds=True)
        self.request = pickle.dumps(args)

    def result(self):
        """The answer; cdi.nvml.NvmlError (one line) when the child hung, crashed or failed."""
        from cdi.nvml import NVML_TIMEOUT_ENV, NvmlError

        label = READERS[self.what][1]
        where = f"driver root {self.driver_root}"
        try:
            out, err = self.process.communicate(self.request, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            raise NvmlError(f"NVML did not answer in {self.timeout:g} s while reading {label} (the driver "
                            f"hangs; {NVML_TIMEOUT_ENV} sets the limit)", where) from None
        status = self.process.returncode
        if status < 0:
            raise NvmlError(f"the NVML library crashed ({signal.Signals(-status).name}) while reading {label}",
                            where)
        if status != 0:
            line = err.decode(errors="replace").strip().splitlines()
            raise NvmlError(f"reading {label} failed: {line[-1] if line else f'exit status {status}'}", where)
        return pickle.loads(out)

    def cancel(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


def read_in_child(what: str, driver_root: str, *args, timeout: float | None = None):
    return ChildRead(what, driver_root, *args, timeout=timeout).result()


# --- the health events: a child that stays, its events one line each -----------------------------------

EVENT_WAIT_SECONDS = 0.05  # one nvmlEventSetWait_v2 of the child: how soon it reads a request in between
TICK_SECONDS = 0.5         # how often it says it is alive (the plugin's hang limit is NVIDIA_CTK_NVML_TIMEOUT)


def _events_loop(driver_root: str) -> None:
    """The child of ChildEventSource: makes NVML's event set, says `ready UUID...`, then for ever prints
    `xid UUID XID GI CI` (`-` for a whole GPU, after `answers UUID 1|0` for it), `lost UUID` and every
    TICK_SECONDS `tick`; a line
    `answers UUID` on stdin is answered `answers UUID 1|0`. Ends when stdin closes (the plugin is gone)."""
    import select
    import time

    from cdi.nvml import in_process
    from device_plugin.health import GpuLost
    from device_plugin.health_nvml import NvmlEventSource

    def say(line: str) -> None:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except OSError:   # the plugin is gone (or stopped its watcher): so is this child, quietly
            os._exit(0)

    with in_process(driver_root, bounded=False) as nvml:   # bounded by the parent, which kills this child
        source = NvmlEventSource(nvml)
    say(" ".join(["ready", *source.gpus.values()]))
    pending, ticked = b"", time.monotonic()
    while True:
        if select.select([0], [], [], 0)[0]:
            data = os.read(0, 4096)
            if not data:
                os._exit(0)
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                what, _, uuid = line.decode(errors="replace").partition(" ")
                if what == "answers":
                    say(f"answers {uuid} {1 if source.answers(uuid) else 0}")
        for event in source.wait(EVENT_WAIT_SECONDS):
            if isinstance(event, GpuLost):
                say(f"lost {event.gpu_uuid}")
            else:
                # whether the GPU still answers, before the XID: the plugin asks it for every critical XID,
                # and a request would wait for this child's next wait to end
                say(f"answers {event.gpu_uuid} {1 if source.answers(event.gpu_uuid) else 0}")
                say(f"xid {event.gpu_uuid} {event.xid} {'-' if event.gi is None else event.gi} "
                    f"{'-' if event.ci is None else event.ci}")
        if time.monotonic() - ticked >= TICK_SECONDS:
            say("tick")
            ticked = time.monotonic()


def main(argv: list[str]) -> int:
    what, driver_root = argv
    if what == "events":
        _events_loop(driver_root)
        return 0
    args = pickle.loads(sys.stdin.buffer.read())
    try:
        answer = READERS[what][0](driver_root, *args)
    except CdiError as e:
        print(str(e), file=sys.stderr)
        return 1
    except Exception as e:   # the parent turns it into its one line
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(pickle.dumps(answer))
    sys.stdout.buffer.flush()
    os._exit(0)   # no NVML shutdown or interpreter teardown to hang in: the answer is out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
