/* runtime_passthrough.c: the runtime shim's fast path (runtime commands, and GPU creates from the
 * create cache, without Python). */
#ifndef GCT_RUNTIME_PASSTHROUGH_H
#define GCT_RUNTIME_PASSTHROUGH_H

#define SHIM_PROGRAM_PREFIX "nvidia-container-runtime"

/* Whether program_name is one of the runtime shim's (nvidia-container-runtime, .cdi, .legacy). */
int is_runtime_shim(const char *program_name);

/* For the shim programs: exec the runtime at once when the command needs no Python; otherwise the
 * environment to start Python with (python_env, the memfd with the caller's environment and our own
 * path), or NULL on failure. */
char **runtime_shim_prepare(const char *name, const char *self, int argc, char **argv, char **envp,
                            char **python_env);

#endif
