"""nvidia-ctk: the admin CLI. Thin click commands over cdi/, simulator/, hook/ and runtime_shim/."""
