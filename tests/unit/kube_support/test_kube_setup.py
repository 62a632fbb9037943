"""The parts of the Kubernetes set-up (tests/support/kube) that read outside text: kubernetes' go.mod (which
staging modules to replace) and `apt-cache policy` (which Debian mirror the machine uses)."""
from __future__ import annotations

from tests.support.kube import paths
from tests.support.kube.build import module_text, staging_replaces
from tests.support.kube.containerd17 import debian_mirror

GO_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tk8s.io/api v0.0.0
\tgithub.com/spf13/cobra v1.10.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // the client
\tgithub.com/example/pinned => github.com/example/pinned v1.2.3
)

replace k8s.io/kubelet => ./staging/src/k8s.io/kubelet
"""


def test_each_staging_module_is_replaced_by_its_published_release_and_other_replaces_are_kept():
    assert staging_replaces(GO_MOD) == {
        "k8s.io/api": f"k8s.io/api {paths.STAGING_VERSION}",
        "k8s.io/client-go": f"k8s.io/client-go {paths.STAGING_VERSION}",
        "k8s.io/kubelet": f"k8s.io/kubelet {paths.STAGING_VERSION}",
        "github.com/example/pinned": "github.com/example/pinned v1.2.3",
    }


def test_the_build_module_requires_the_release_and_lists_every_replace():
    text = module_text(staging_replaces(GO_MOD))
    assert f"require k8s.io/kubernetes {paths.KUBE_VERSION}\n" in text
    assert f"\tk8s.io/kubelet => k8s.io/kubelet {paths.STAGING_VERSION}\n" in text
    assert "./staging" not in text


POLICY = """Package files:
 100 /var/lib/dpkg/status
     release a=now
 500 http://security.example/debian-security bookworm-security/main amd64 Packages
     release v=12,o=Debian,a=oldstable-security,n=bookworm-security,l=Debian-Security,c=main,b=amd64
 500 http://ppa.example/ubuntu bookworm/main amd64 Packages
     release o=SomeoneElse,n=bookworm,c=main,b=amd64
 500 http://mirror.example/debian bookworm/main amd64 Packages
     release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=main,b=amd64
     origin mirror.example
Pinned packages:
"""


def test_the_mirror_is_the_debian_archive_of_the_machines_release():
    assert debian_mirror(POLICY, "bookworm") == "http://mirror.example/debian"


def test_no_mirror_without_a_debian_source_for_that_release():
    assert debian_mirror(POLICY, "trixie") is None
    assert debian_mirror(POLICY.replace("o=Debian,a=oldstable,", "o=Other,"), "bookworm") is None


def test_kube_bin_dir_names_the_users_binaries_and_a_missing_one_is_the_skip_reason(tmp_path, monkeypatch):
    from tests.support.kube.fixtures import skip_reason_for_binaries

    for name in paths.KUBE_COMMANDS:
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv(paths.KUBE_BIN_DIR_ENV, str(tmp_path))
    assert paths.kube_bin_dir() == tmp_path
    assert skip_reason_for_binaries() is None
    (tmp_path / "kube-scheduler").unlink()
    reason = skip_reason_for_binaries()
    assert "kube-scheduler missing in " + str(tmp_path) in reason and "KUBE_BIN_DIR=DIR" in reason
    assert "\n" not in reason


def test_a_part_that_cannot_be_had_is_recorded_for_the_skip_line_and_fails_only_under_ci(tmp_path, monkeypatch,
                                                                                          capsys):
    from tests.support.kube import setup
    from tests.support.kube.fixtures import skip_reason_for_binaries
    from tests.support.kube.setup_common import SetupError

    def no_proxy():
        raise SetupError("go mod download failed: proxy unreachable", "go proxy")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(paths.KUBE_BIN_DIR_ENV, raising=False)
    monkeypatch.setattr(setup, "PARTS", (("kube", no_proxy),))
    monkeypatch.delenv("CI", raising=False)
    assert setup.main() == 0
    assert capsys.readouterr().err.splitlines()[0] == \
        "kube-setup: error: go mod download failed: proxy unreachable (go proxy)"
    assert "proxy unreachable (go proxy)" in skip_reason_for_binaries()
    monkeypatch.setenv("CI", "true")
    assert setup.main() == 1
    monkeypatch.setattr(setup, "PARTS", (("kube", lambda: None),))
    assert setup.main() == 0
    assert not paths.unavailable_file("kube").exists()


def test_nvidias_plugin_is_built_by_the_set_up_from_its_release_and_a_failure_is_the_parity_tests_skip_line(
        tmp_path, monkeypatch):
    from tests.support.kube import setup
    from tests.support.kube.fixtures import skip_reason_for_nvidia_plugin
    from tests.support.kube.nvidia_plugin_build import module_text as plugin_module

    assert ("nvidia-device-plugin", setup.ensure_nvidia_plugin) in setup.PARTS
    assert f"require github.com/NVIDIA/k8s-device-plugin {paths.NVIDIA_PLUGIN_VERSION}\n" in plugin_module()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert "missing" in skip_reason_for_nvidia_plugin()
    paths.unavailable_file("nvidia-device-plugin").parent.mkdir(parents=True)
    paths.unavailable_file("nvidia-device-plugin").write_text("gcc is missing (cgo builds go-nvml) (PATH)\n")
    assert skip_reason_for_nvidia_plugin() == ("NVIDIA's nvidia-device-plugin not available: gcc is missing "
                                               "(cgo builds go-nvml) (PATH) (`make kube` builds it)")
    binary = paths.nvidia_plugin_bin_dir() / "nvidia-device-plugin"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert skip_reason_for_nvidia_plugin() is None
