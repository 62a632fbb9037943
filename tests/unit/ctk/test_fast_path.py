"""ctk.fast_path reads `cdi generate` command lines without click: where it reads one, the parameters
are exactly click's; everything else is left to click (which parses it or words the usage error)."""
import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctk.cdi_generate import generate as command
from ctk.cdi_generate_run import OPTIONS
from ctk.fast_path import parse_generate


def clicks_params(tokens):
    """The parameters click passes to the command, or None for a command line click refuses."""
    try:
        with command.make_context("generate", list(tokens)) as ctx:
            return ctx.params
    except click.exceptions.ClickException:
        return None
    except click.exceptions.Exit:   # --help
        return None


NAMES = [o.name for o in OPTIONS] + ["-o", "--help", "-h", "--", "--bogus", "--debug", "--driver", "--no-all-devices"]
VALUES = ["x", "/tmp/out.yaml", "-", "", "yaml", "json", "YAML", "index", "uuid", "type-index", "0", "1:0", "a=b",
          "--output", "-x", "nvidia.com", "/usr/bin/nvidia-cdi-hook", "GPU-1", " "]
tokens = st.lists(st.one_of(st.sampled_from(NAMES), st.sampled_from(VALUES),
                            st.builds(lambda n, v: f"{n}={v}", st.sampled_from(NAMES), st.sampled_from(VALUES))),
                  max_size=8)


@settings(max_examples=3000, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(tokens)
def test_what_the_fast_path_reads_click_reads_the_same(args):
    parsed = parse_generate(["cdi", "generate", *args])
    if parsed is not None:
        assert parsed == (False, clicks_params(args))


@pytest.mark.parametrize("args", [
    [],
    ["--driver-root", "/r", "--output", "/o.yaml"],
    ["--driver-root=/r", "--format", "json", "--no-all-device", "--vendor=v.example", "--class", "c"],
    ["--device-id", "0", "--device-id=1:0", "--device-name-strategy", "uuid", "--device-name-strategy=index"],
    ["--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook", "--output=a=b.json"],
])
def test_plain_command_lines_are_read_here(args):
    assert parse_generate(["cdi", "generate", *args]) == (False, clicks_params(args))
    assert parse_generate(["--debug", "cdi", "generate", *args]) == (True, clicks_params(args))


@pytest.mark.parametrize("args", [
    ["cdi", "generate", "-o", "x.yaml"], ["cdi", "generate", "--help"], ["cdi", "generate", "--output"],
    ["cdi", "generate", "--format", "xml"], ["cdi", "generate", "--vendor", "a", "--vendor", "b"],
    ["cdi", "generate", "--no-all-device=1"], ["cdi", "generate", "extra"], ["cdi", "generate", "--output", "-"],
    ["cdi", "list"], ["--version"], ["cdi", "--debug", "generate"], ["--debug", "--debug", "cdi", "generate"], [],
])
def test_everything_else_goes_to_click(args):
    assert parse_generate(args) is None


def test_shell_completion_goes_to_click(monkeypatch):
    monkeypatch.setenv("_NVIDIA_CTK_COMPLETE", "bash_complete")
    assert parse_generate(["cdi", "generate"]) is None


def test_the_click_command_is_built_from_the_same_table():
    by_dest = {p.name: p for p in command.params if isinstance(p, click.Option)}
    assert [p.name for p in command.params if isinstance(p, click.Option)][:len(OPTIONS)] == [o.dest for o in OPTIONS]
    for option in OPTIONS:
        param = by_dest[option.dest]
        assert option.name in param.opts and param.multiple == option.multiple and param.is_flag == option.flag
        assert (param.type.choices if isinstance(param.type, click.Choice) else None) == \
            (tuple(option.choices) if option.choices else None)
