/* The driver's helper programs of the simulated host (nvidia-debugdump, nvidia-persistenced,
 * nvidia-cuda-mps-control, nvidia-cuda-mps-server): one small static executable, installed under
 * each name. It says what it is and succeeds, so that a container can run what was injected. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *name = argc > 0 && argv[0] ? argv[0] : "nvidia-tool";
    const char *slash = strrchr(name, '/');
    printf("%s: simulated NVIDIA driver %s (no GPU behind it)\n", slash ? slash + 1 : name, NVSIM_DRIVER_VERSION);
    return 0;
}
