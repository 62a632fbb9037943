/* Every other driver library of the simulated host (libnvidia-cfg, libGLX_nvidia, ...): a real ELF
 * shared object with its own soname (set at link time), so that ldconfig, ld.so.cache readers and
 * the dynamic loader treat it like the real file. It exports one symbol that says what it is. */
__attribute__((visibility("default"))) const char nvsim_library_description[] =
    "simulated NVIDIA driver library (no GPU behind it)";
