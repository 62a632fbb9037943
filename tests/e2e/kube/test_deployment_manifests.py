"""The device plugin's Kubernetes manifests (packaging/kubernetes/) checked by a real API server (the
control plane of tests/support/kube): each is created with a server-side dry run and strict field
validation, so an unknown or misplaced field, a wrong apiVersion, an invalid value or a priority class
the cluster does not have is refused, and nothing is stored. The DaemonSet is not run: its image needs
a base image from a registry this machine cannot reach."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.kube.control_plane import ApiError

pytestmark = pytest.mark.e2e

KUBERNETES = Path(__file__).resolve().parents[3] / "packaging" / "kubernetes"
COLLECTIONS = {"ConfigMap": "/api/v1/namespaces/{ns}/configmaps", "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
               "RuntimeClass": "/apis/node.k8s.io/v1/runtimeclasses"}
DRY_RUN = "?dryRun=All&fieldValidation=Strict"


def collection(doc: dict) -> str:
    return COLLECTIONS[doc["kind"]].format(ns=doc["metadata"].get("namespace", "default")) + DRY_RUN


def test_the_api_server_accepts_every_manifest_and_stores_none(kube_node):
    node = kube_node(control_plane=True)
    docs = [d for path in sorted(KUBERNETES.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "DaemonSet", "RuntimeClass"]
    for doc in docs:
        answer = node.api.create(collection(doc), doc)
        assert (answer["kind"], answer["metadata"]["name"]) == (doc["kind"], doc["metadata"]["name"])
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    # a pod of the template, dry-run too: the server's admission gives it the priority of the class it
    # names (system-node-critical, which only kube-system's pods may use)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nvidia-device-plugin-probe",
                                                           "namespace": daemonset["metadata"]["namespace"]},
           "spec": daemonset["spec"]["template"]["spec"]}
    answer = node.api.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods{DRY_RUN}", pod)
    assert answer["spec"]["priority"] == 2000001000
    with pytest.raises(ApiError, match="not found"):   # a dry run stores nothing
        node.api.get(f"/apis/apps/v1/namespaces/kube-system/daemonsets/{daemonset['metadata']['name']}")
    # the same check refuses a misplaced field (so it can fail)
    bad = yaml.safe_load(yaml.safe_dump(daemonset))
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(ApiError, match="unknown field"):
        node.api.create(collection(bad), bad)
