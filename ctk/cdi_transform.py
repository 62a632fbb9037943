"""`nvidia-ctk cdi transform root`: NVIDIA's command moving the root of a spec's paths (cdi.transform_root),
e.g. a spec generated in a driver container for the host. Read from --input (a file, or '-': stdin),
checked by the strict schema, written to --output (atomically, as `cdi generate` writes) or stdout."""
from __future__ import annotations

import sys

import click

from ctk.errors import CliError


@click.group("transform")
def transform() -> None:
    """Apply a transform to a CDI spec."""


@transform.command("root")
@click.option("--from", "root", required=True, help="The root to replace (an absolute path; '/' takes every path).")
@click.option("--to", "to", required=True, help="The root put in its place (an absolute path).")
@click.option("--relative-to", type=click.Choice(("host", "container")), default="host", show_default=True,
              help="Move the host's paths (hostPath, hook programs) or the container's (path, containerPath).")
@click.option("--input", "input_file", default="-", show_default=True, help="The spec to read; '-': stdin.")
@click.option("-o", "--output", help="File to write (atomically, mode 0644); none or '-': stdout.")
def root_command(root: str, to: str, relative_to: str, input_file: str, output: str | None) -> None:
    """Move every path of a CDI spec under --from to --to (NVIDIA's `cdi transform root`)."""
    from cdi.errors import CdiError
    from cdi.spec import Spec
    from cdi.spec_file import parse_spec_text, read_spec_bytes, render_spec, write_spec
    from cdi.transform_root import transform_root
    from cdi.validate import validate_document
    from ctk.files import make_parent_dirs

    for value, flag in ((root, "--from"), (to, "--to")):
        if not value.startswith("/"):
            raise CliError(f"the root must be an absolute path, not {value!r}", flag)
    where = "stdin" if input_file == "-" else input_file
    try:
        data = sys.stdin.buffer.read() if input_file == "-" else read_spec_bytes(input_file)[0]
    except OSError as e:
        raise CliError(f"cannot read the spec: {e.strerror or e}", where) from None
    try:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CliError(f"not UTF-8 text: byte {e.start}", where) from None
        # stdin and any name but *.json: YAML, which reads JSON too
        document = parse_spec_text(text, where, yaml_format=not where.endswith(".json"))
        validate_document(document, where, raise_first=True)
        spec = transform_root(Spec.from_dict(document), root, to, relative_to)
        if output and output != "-":
            make_parent_dirs(output)
            write_spec(spec, output, own_hooks=False)
        else:
            sys.stdout.write(render_spec(spec, "stdout", yaml_format=True, own_hooks=False))
    except CdiError as e:
        raise CliError(e.what, e.where) from None
    except OSError as e:
        raise CliError(f"cannot write the spec: {e.strerror or e}", output) from None
