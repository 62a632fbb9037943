"""nvidia-device-plugin: the kubelet device plugin for NVIDIA GPUs and MIG devices (docs/device-plugin.md)."""
