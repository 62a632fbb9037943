"""`nvidia-ctk runtime configure`: flags and messages only; the logic is runtime_shim.engine_config."""
from __future__ import annotations

import os
import sys

import click

from ctk.errors import CliError, info
from runtime_shim.engine_config import ENGINES, EngineConfigError, RuntimeRequest, apply_plan, plan_runtime_config
from runtime_shim.engine_config.common import HOOK_EXECUTABLE, RUNTIME_EXECUTABLE, find_program


def _beside_us() -> list[str]:
    """Directories of this nvidia-ctk: its script and its interpreter (a virtualenv's bin, or /usr/bin)."""
    dirs = [os.path.dirname(os.path.abspath(sys.argv[0])), os.path.dirname(os.path.abspath(sys.executable))]
    return list(dict.fromkeys(dirs))


@click.group("runtime")
def runtime() -> None:
    """Configure container engines to use the NVIDIA Container Runtime."""


@runtime.command("configure")
@click.option("--runtime", "engine", type=click.Choice(ENGINES), default="docker", show_default=True,
              help="The container engine to configure.")
@click.option("--config", "config_path", metavar="PATH",
              help="The engine's config file (podman: the hooks.d file to write). "
                   "Defaults: /etc/docker/daemon.json, /etc/containerd/config.toml, /etc/crio/crio.conf, "
                   "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json.")
@click.option("--drop-in-config", "drop_in", metavar="PATH",
              help="containerd/CRI-O: the drop-in to write [conf.d/99-nvidia.toml resp. "
                   "crio.conf.d/99-nvidia.toml beside --config].")
@click.option("--oci-hook-path", "hook_file", metavar="PATH", help="podman: the hooks.d file to write (as --config).")
@click.option("--nvidia-runtime-name", "name", default="nvidia", show_default=True,
              help="The name of the runtime in the engine's config.")
@click.option("--nvidia-runtime-path", "--runtime-path", "runtime_path", metavar="PATH",
              help=f"The runtime executable [the {RUNTIME_EXECUTABLE} beside nvidia-ctk, else in PATH].")
@click.option("--nvidia-runtime-hook-path", "hook_path", metavar="PATH",
              help=f"podman: the hook executable [the {HOOK_EXECUTABLE} beside nvidia-ctk, else in PATH].")
@click.option("--config-mode", type=click.Choice(["config-file", "config", "oci-hook", "hook"]),
              help="oci-hook/hook: write an OCI hooks.d file, whatever --runtime says (as --runtime=podman).")
@click.option("--nvidia-set-as-default", "--set-as-default", "set_as_default", is_flag=True,
              help="Make the NVIDIA runtime the engine's default runtime.")
@click.option("--cdi.enabled", "--cdi.enable", "--enable-cdi", "enable_cdi", is_flag=True,
              help="Enable CDI in the engine (docker: features.cdi; containerd: enable_cdi).")
@click.option("--dry-run", is_flag=True, help="Print the changes as a unified diff; write nothing.")
@click.option("--remove", is_flag=True, help="Undo what configure added.")
def configure(engine: str, config_path: str | None, drop_in: str | None, hook_file: str | None, name: str,
              runtime_path: str | None, hook_path: str | None, config_mode: str | None, set_as_default: bool,
              enable_cdi: bool, dry_run: bool, remove: bool) -> None:
    """Add (or with --remove, take out) the NVIDIA runtime in a container engine's configuration.

    Never restarts or reloads the engine; it says which daemon to restart, or to reload where that is
    enough (docker, for runtimes and default-runtime: running containers keep running).
    """
    if config_mode in ("oci-hook", "hook"):
        engine = "podman"
    if hook_file:
        if engine != "podman":
            raise CliError("--oci-hook-path needs --runtime=podman or --config-mode=oci-hook", "--oci-hook-path")
        config_path = hook_file
    if not name or "/" in name or any(c.isspace() for c in name):
        raise CliError(f"invalid runtime name {name!r}", "--nvidia-runtime-name")
    request = RuntimeRequest(
        name=name,
        runtime_path=runtime_path or find_program(RUNTIME_EXECUTABLE, _beside_us()),
        hook_path=hook_path or find_program(HOOK_EXECUTABLE, _beside_us()),
        set_as_default=set_as_default,
        enable_cdi=enable_cdi,
    )
    try:
        plan = plan_runtime_config(engine, request, config_path, drop_in, remove=remove)
        if not remove:
            wanted = request.hook_path if engine == "podman" else request.runtime_path
            if os.path.isabs(wanted) and not os.access(wanted, os.X_OK):
                info(f"warning: {wanted} is not an executable here; the engine will fail to use it until it is")
        for note in plan.notes:
            info(note)
        if dry_run:
            click.echo(plan.diff(), nl=False)
            if not plan.pending:
                info("nothing to change")
            return
        apply_plan(plan)
    except EngineConfigError as exc:
        raise CliError(exc.what, exc.where) from None

    shown = [c for c in plan.pending if c.show_diff]
    if not shown:
        info(f"nothing to change: {engine} is already {'without' if remove else 'configured for'} "
              f"the runtime {name!r}")
        return
    for change in shown:
        info(f"{'removed' if change.after is None else 'wrote'} {change.path}")
    if plan.restart and plan.reload_enough:
        info(f"reload {plan.restart} to apply this (nvidia-ctk does not), e.g. `systemctl reload {plan.restart}` "
              "(a SIGHUP to the daemon): running containers keep running")
    elif plan.restart:
        info(f"restart {plan.restart} to apply this (nvidia-ctk does not restart it), "
              f"e.g. `systemctl restart {plan.restart}`")
    else:
        info(f"{engine} reads the change for each new container; nothing to restart")
