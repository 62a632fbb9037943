/* libcontainer_c: declarations shared by the C sources and used verbatim as the cffi cdef.
 * Conventions: functions return >= 0 on success and -1 with errno set on failure. */

/* version.c */
int gct_abi_version(void);
