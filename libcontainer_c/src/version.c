#include "libcontainer.h"

/* Bumped when a declaration in libcontainer.h changes meaning; the wrapper checks it at import. */
int gct_abi_version(void)
{
    return 6;
}
