"""The model and discovery: CDI edits and specs, the schema, config.toml, the request resolver,
NVML inventory and driver files. Pure Python; uses neither libcontainer_c nor click."""
