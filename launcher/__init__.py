"""The static launcher every root-run program is a copy of (launcher.c and the C beside it), its
builder and installer (install_launchers), and the probe the launcher tests run."""
