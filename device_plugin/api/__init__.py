"""The kubelet device-plugin API v1beta1: the .proto and the stubs generated from it (see generate.py)."""
