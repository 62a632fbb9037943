"""python -m bench [--runs N] [NAME...]: run the benchmarks and print medians and ratios vs plain runc."""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> module with run(runs) -> str; each compares against plain runc within its own run
BENCHMARKS = {
    "runc": "bench.runc_lifecycle",
    "hook": "bench.hook_lifecycle",
    "cdi-generate": "bench.cdi_generate",
    "shim": "bench.shim_lifecycle",
    "cdi-hook": "bench.cdi_hook",
    "edits": "bench.edits",
    "lifecycle": "bench.gpu_lifecycle",
    "ctr": "bench.ctr_lifecycle",
    "lxc": "bench.lxc_lifecycle",
    "device-plugin": "bench.device_plugin",
    "driver-dir": "bench.driver_dir",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per case (after one warm-up)")
    parser.add_argument("names", nargs="*", choices=[[], *BENCHMARKS], metavar="NAME",
                        help=f"benchmarks to run (default all: {', '.join(BENCHMARKS)})")
    parser.add_argument("--env-rows", action="store_true",
                        help="lifecycle: also the cdi row with the config named by NVIDIA_CTK_CONFIG_FILE_PATH, "
                             "with and without NVIDIA_CTK_CACHE_DIR")
    args = parser.parse_args(argv)
    for name in args.names or BENCHMARKS:
        options = {"env_rows": args.env_rows} if name == "lifecycle" else {}
        print(importlib.import_module(BENCHMARKS[name]).run(args.runs, **options), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
