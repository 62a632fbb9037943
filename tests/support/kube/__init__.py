"""Real Kubernetes for the e2e tests: the set-up that obtains the binaries (`build`, `containerd17`), and
the harness that starts containerd, a kubelet and a control plane in a private mount namespace (`harness`).
See docs/kubernetes-testing.md."""
