"""What a program started by the launcher sees; the launcher tests run it as `gct-launcher-probe`."""
import json
import os
import sys


def main() -> int:
    json.dump(
        {
            "argv": sys.argv,
            "env": dict(os.environ),
            "flags": {"isolated": sys.flags.isolated, "no_site": sys.flags.no_site,
                      "ignore_environment": sys.flags.ignore_environment},
            "path": sys.path,
            "modules": sorted(m for m in sys.modules if not m.startswith("_")),
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0
