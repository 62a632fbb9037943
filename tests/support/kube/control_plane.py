"""A control plane for a test: etcd, kube-apiserver, kube-scheduler and kube-controller-manager, each on
loopback ports of its own, in the node's mount namespace, and `Api`, a small client of the API server
(raw HTTPS with a bearer token: the tests need a handful of calls, not a client library).

The API server authenticates one static token (a member of system:masters) and allows everything
(AlwaysAllow); the ServiceAccount admission plugin is off (test pods need no service account) and so is
priority and fairness. Its serving certificate is self-signed (--cert-dir); the service-account key pair
is made with openssl. The controller manager's node-lifecycle controller removes the
node.kubernetes.io/not-ready taint the API server gives a new node, once the node is Ready.
"""
from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.e2e.engines import Daemon, _spawn, _wait_for
from tests.support.kube.namespace import MountNamespace

SERVICE_RANGE = "10.96.0.0/24"


class ApiError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"HTTP {status}: {text}")
        self.status = status


@dataclass
class Api:
    """The API server at https://127.0.0.1:port, as the token's user."""
    port: int
    token: str

    def request(self, method: str, path: str, body: dict | None = None,
                content_type: str = "application/json") -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": content_type, "Accept": "application/json"})
        context = ssl._create_unverified_context()  # noqa: S323 - the test API server's self-signed cert
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as answer:
                text = answer.read()
        except urllib.error.HTTPError as err:
            raise ApiError(err.code, err.read().decode(errors="replace").strip()) from None
        try:
            return json.loads(text)
        except ValueError:
            return {"text": text.decode(errors="replace")}

    def get(self, path: str) -> dict:
        return self.request("GET", path)

    def create(self, path: str, body: dict) -> dict:
        return self.request("POST", path, body)

    def delete(self, path: str) -> dict:
        return self.request("DELETE", path)

    def patch(self, path: str, body: dict) -> dict:
        return self.request("PATCH", path, body, "application/strategic-merge-patch+json")

    def ready(self) -> bool:
        try:
            return self.get("/readyz").get("text") == "ok"
        except (OSError, ApiError):
            return False

    # the calls the tests make most
    def create_pod(self, manifest: dict, namespace: str = "default") -> dict:
        return self.create(f"/api/v1/namespaces/{namespace}/pods", manifest)

    def pod(self, name: str, namespace: str = "default") -> dict:
        return self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def node(self, name: str) -> dict:
        return self.get(f"/api/v1/nodes/{name}")

    def pod_log(self, name: str, namespace: str = "default", container: str | None = None) -> str:
        query = f"?container={container}" if container else ""
        return self.get(f"/api/v1/namespaces/{namespace}/pods/{name}/log{query}").get("text", "")


def node_ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def kubeconfig(api: Api) -> dict:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": f"https://127.0.0.1:{api.port}",
                                                      "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": api.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}]}


@dataclass
class ControlPlane:
    api: Api
    kubeconfig: Path
    daemons: list[Daemon]


def _service_account_keys(workdir: Path) -> tuple[Path, Path]:
    key, public = workdir / "sa.key", workdir / "sa.pub"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(public)], check=True,
                   capture_output=True)
    return key, public


def start(ns: MountNamespace, workdir: Path, bin_dir: Path, ports: dict[str, int],
          controller_manager: bool = True) -> ControlPlane:
    """etcd, the API server (ready when /readyz says ok), the scheduler and (by default) the controller
    manager. The caller stops plane.daemons, newest first, also when this raises half-way (started ones
    are in the list it passes)."""
    workdir.mkdir(parents=True)
    daemons: list[Daemon] = []
    try:
        return _start_all(ns, workdir, bin_dir, ports, controller_manager, daemons)
    except BaseException as exc:
        exc.started_daemons = daemons  # type: ignore[attr-defined]
        raise


def _start_all(ns, workdir, bin_dir, ports, controller_manager, daemons) -> ControlPlane:
    def spawn(name: str, argv: list[str]) -> Daemon:
        own = workdir / name
        own.mkdir()
        daemon = _spawn(name, ns.argv(argv), own, own / "no-socket", [])
        daemons.append(daemon)
        return daemon

    client = f"http://127.0.0.1:{ports['etcd']}"
    peer = f"http://127.0.0.1:{ports['etcd-peer']}"
    etcd = spawn("etcd", ["etcd", "--name", "test", "--data-dir", str(workdir / "etcd-data"),
                          "--listen-client-urls", client, "--advertise-client-urls", client,
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", f"test={peer}"])
    _wait_for(lambda: _http_ok(f"{client}/health"), etcd, "its /health answered")

    token = secrets.token_hex(16)
    (workdir / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
    sa_key, sa_pub = _service_account_keys(workdir)
    api = Api(ports["apiserver"], token)
    apiserver = spawn("kube-apiserver", [
        str(bin_dir / "kube-apiserver"), f"--etcd-servers={client}", "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1", f"--secure-port={api.port}", f"--cert-dir={workdir / 'apiserver-certs'}",
        f"--token-auth-file={workdir / 'tokens.csv'}", "--authorization-mode=AlwaysAllow",
        "--disable-admission-plugins=ServiceAccount", "--enable-priority-and-fairness=false",
        f"--service-account-key-file={sa_pub}", f"--service-account-signing-key-file={sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc", f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--allow-privileged=true", "--kubelet-preferred-address-types=Hostname", "--profiling=false"])
    _wait_for(api.ready, apiserver, "its /readyz said ok", timeout=120)

    config = workdir / "kubeconfig"
    config.write_text(yaml.safe_dump(kubeconfig(api)))
    auth = [f"--kubeconfig={config}", f"--authentication-kubeconfig={config}", f"--authorization-kubeconfig={config}",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--profiling=false"]
    spawn("kube-scheduler", [str(bin_dir / "kube-scheduler"), *auth, f"--secure-port={ports['scheduler']}"])
    if controller_manager:
        spawn("kube-controller-manager", [
            str(bin_dir / "kube-controller-manager"), *auth, f"--secure-port={ports['controller-manager']}",
            "--use-service-account-credentials=false", f"--service-account-private-key-file={sa_key}",
            f"--service-cluster-ip-range={SERVICE_RANGE}", "--node-monitor-grace-period=20s"])
    return ControlPlane(api, config, daemons)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def wait_until(check, what: str, timeout: float, daemons: list[Daemon] = (), interval: float = 0.5):
    """check()'s first true value within timeout, else AssertionError naming what (with the daemons' logs)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {d.name} log ---\n{d.log_tail(20)}" for d in daemons)
            raise AssertionError(f"not within {timeout:.0f} s: {what}\n{logs}")
        time.sleep(interval)
