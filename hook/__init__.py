"""nvidia-container-runtime-hook, nvidia-container-cli and nvidia-cdi-hook: state -> edits -> live injection."""
