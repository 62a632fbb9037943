"""nvidia-container-runtime: the OCI runtime shim in front of runc/crun."""
