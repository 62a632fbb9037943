"""`nvidia-ctk simulate create DIR`: build a simulated GPU host (a driver root with a real C
libnvidia-ml.so.1, nvidia-smi, device nodes and driver files) for machines without a GPU.
`nvidia-ctk simulate exec DIR -- CMD`: run a tool that reads the host's own paths against it, in a
private mount namespace (simulator.namespace)."""
from __future__ import annotations

import click

from ctk.errors import CliError

_DEFAULTS = {"gpus": 2, "model": "NVIDIA A100-SXM4-40GB", "driver": "550.54.15", "cuda": "12.4"}


@click.group()
def simulate() -> None:
    """Simulated GPU hosts: rehearse and test GPU containers without a GPU."""


@simulate.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--gpus", type=int, default=_DEFAULTS["gpus"], show_default=True, help="Number of GPUs (1-16).")
@click.option("--model", default=_DEFAULTS["model"], show_default=True,
              help="GPU model, e.g. 'NVIDIA A100-SXM4-80GB', 'NVIDIA H100 80GB HBM3', 'NVIDIA A30', 'Tesla T4'.")
@click.option("--driver-version", default=_DEFAULTS["driver"], show_default=True, help="Driver version.")
@click.option("--cuda-version", default=_DEFAULTS["cuda"], show_default=True,
              help="Highest CUDA version the driver supports (MAJOR.MINOR).")
@click.option("--mig", "mig", multiple=True, metavar="GPU=PROFILE[,PROFILE...]",
              help="Enable MIG on GPU (an index) with these GPU instance profiles, e.g. 1=3g.20gb,1g.5gb, "
                   "each with one compute instance spanning it; <C>c.<profile> (1c.3g.20gb) gives it one of "
                   "C compute slices instead. Repeat for more GPUs; at most 7 MIG devices per GPU.")
@click.option("--imex-channels", type=int, default=0, show_default=True, metavar="N",
              help="Create IMEX channel nodes channel0..N-1 (nvidia-caps-imex-channels).")
@click.option("--pcie", "pcie", multiple=True, metavar="LEVEL=GPUS",
              help="Put GPUS (0-3 or 0,2,5) under one PCIe LEVEL: board, switch, multi-switch, host-bridge or cpu. "
                   "Repeatable; pairs in no common group are across CPUs. Default: all GPUs on one CPU.")
@click.option("--nvlink", "nvlink", multiple=True, metavar="GPUS[:LINKS]",
              help="Link every pair of GPUS (0-3 or 0,2,5) with LINKS NVLinks (default 1). Repeatable, e.g. "
                   "--nvlink 0-3:4 --nvlink 4-7:4 for two 4-GPU islands.")
@click.option("--force", is_flag=True, help="Replace a simulated host that already exists in DIRECTORY.")
def create(directory: str, gpus: int, model: str, driver_version: str, cuda_version: str,
           mig: tuple[str, ...], imex_channels: int, pcie: tuple[str, ...], nvlink: tuple[str, ...],
           force: bool) -> None:
    """Build a simulated GPU host in DIRECTORY (needs root for mknod, and gcc).

    Use it wherever a driver root is accepted: --driver-root DIRECTORY, NVIDIA_CTK_DRIVER_ROOT or
    config.toml [nvidia-container-cli] root. Its own dev/, proc/ and sys/ stand in for the host's.
    """
    from simulator.host_builder import create_simulated_host
    from simulator.host_spec import SimulatorError

    try:
        host = create_simulated_host(directory, gpus=gpus, model=model, driver_version=driver_version,
                                     cuda_version=cuda_version, mig_options=list(mig),
                                     imex_channels=imex_channels, force=force, pcie_options=list(pcie),
                                     nvlink_options=list(nvlink))
    except SimulatorError as e:
        raise CliError(e.what, e.where) from None
    migs = sum(len(g.migs) for g in host.gpus)
    click.echo(f"Simulated host created in {directory}: {len(host.gpus)} x {host.gpus[0].model.name}, "
               f"{migs} MIG device{'s' if migs != 1 else ''}, driver {host.driver_version}, CUDA {host.cuda_version}")


@simulate.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--gpu", type=int, required=True, help="The GPU (an index).")
@click.option("--xid", type=int, required=True, help="The XID, e.g. 79 (fallen off the bus: the GPU is lost), 48, 13.")
@click.option("--mig", type=int, default=None, metavar="INDEX",
              help="Raise it on this MIG device of the GPU (its index, as nvidia-smi -L lists them).")
def xid(directory: str, gpu: int, xid: int, mig: int | None) -> None:
    """Raise an XID error on a GPU of the simulated host in DIRECTORY.

    Every NVML event set registered for XidCriticalError on the GPU receives it (eventData = the XID;
    gpuInstanceId/computeInstanceId of the MIG device, or 0xFFFFFFFF). XID 79 also loses the GPU: NVML
    calls on it answer NVML_ERROR_GPU_IS_LOST until `nvidia-ctk simulate reset`.
    """
    from simulator.host_spec import SimulatorError
    from simulator.host_state import raise_xid

    try:
        uuid = raise_xid(directory, gpu, xid, mig)
    except SimulatorError as e:
        raise CliError(e.what, e.where) from None
    click.echo(f"XID {xid} raised on GPU {gpu} ({uuid}){f' MIG device {mig}' if mig is not None else ''}")


@simulate.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--gpu", type=int, required=True, help="The GPU (an index).")
def reset(directory: str, gpu: int) -> None:
    """Reset a GPU of the simulated host in DIRECTORY: NVML answers for it again."""
    from simulator.host_spec import SimulatorError
    from simulator.host_state import reset_gpu

    try:
        uuid = reset_gpu(directory, gpu)
    except SimulatorError as e:
        raise CliError(e.what, e.where) from None
    click.echo(f"GPU {gpu} ({uuid}) reset")


@simulate.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("directory", type=click.Path(file_okay=False))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(directory: str, command: tuple[str, ...]) -> None:
    """Run COMMAND as if the simulated host in DIRECTORY were this machine's driver (needs root).

    For tools that take no driver root (NVIDIA's nvidia-ctk cdi generate, nvidia-container-cli,
    pynvml scripts): in a private mount namespace, /dev gets the simulated nodes (nvidia*, dri/),
    /proc/driver its nvidia/ and nvidia-caps/ (mig-minors), /sys/bus/pci/devices its GPUs, and
    LD_LIBRARY_PATH starts with its libraries. Nothing changes outside the namespace.

        nvidia-ctk simulate exec /tmp/gpu-host -- nvidia-smi -L
    """
    import os

    from simulator.host_spec import SimulatorError
    from simulator.namespace import check_root, exec_argv

    try:
        root = check_root(directory)
    except SimulatorError as e:
        raise CliError(e.what, e.where) from None
    argv = exec_argv(root, list(command[1:] if command[:1] == ("--",) else command))
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        raise CliError(f"cannot run {argv[0]}: {e.strerror}", "simulate exec") from None
