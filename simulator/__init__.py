"""The simulated GPU host: C sources of libnvidia-ml.so.1 and nvidia-smi, and the driver-root builder."""
