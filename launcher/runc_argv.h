/* runc_argv.c: runc 1.1.5's command line as runc reads it (runtime_shim/runc_argv.py is the Python twin,
 * docs/c-twins.md). */
#ifndef GCT_RUNC_ARGV_H
#define GCT_RUNC_ARGV_H

/* The index in argv of the subcommand runc runs, or 0 when it runs none (a usage error, help or
 * version); *prints_version: whether it prints its version. */
int runc_globals(int argc, char **argv, int *prints_version);

/* The bundle of a create/run (argv[index] is the command) as runc finds it: 1 and *bundle (NULL: the
 * current directory), or 0 when unclear (then Python decides). */
int runc_create_bundle(int argc, char **argv, int index, const char **bundle);

#endif
