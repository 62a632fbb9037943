"""NVML read in a child process with a deadline, for what `gct-nvml-inventory` does not print: the GPU
topology (GetPreferredAllocation) and the node-label facts (MIG attributes).

Why: a driver whose library hangs in a call (nvmlInit, a topology call) or crashes (SIGSEGV) must not
hang or kill the plugin. In this process a hang could only be bounded by ending the whole program
(cdi.nvml's watchdog), and a crash would end it with no line at all. Here the child is killed at the
deadline (NVIDIA_CTK_NVML_TIMEOUT, default 60 s) and either case is one NvmlError line naming what was
being read; the plugin then serves without it (unknown topology, no labels written).

    python -m device_plugin.nvml_child WHAT DRIVER_ROOT      (stdin: the pickled arguments)

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


class ChildRead:
    """One reader started in its child: `result()` waits for its answer (by the deadline)."""

    def __init__(self, what: str, driver_root: str, *args, timeout: float | None = None):
        from cdi.nvml import nvml_timeout

        self.what, self.driver_root = what, driver_root
        self.timeout = nvml_timeout() if timeout is None else timeout
        # a fresh interpreter, not a fork: the plugin has gRPC's threads, which a fork does not carry over
        self.process = subprocess.Popen([sys.executable, "-m", "device_plugin.nvml_child", what, driver_root],
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


def main(argv: list[str]) -> int:
    what, driver_root = argv
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
