/* The one table of environment settings (config.c): name, NCCL alias, default,
 * help.  Values are read once, at first use. */
#ifndef MPCCL_CONFIG_H
#define MPCCL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The value of MPCCL_<name> (or its NCCL_ alias, or the default); name is given
 * without the prefix, e.g. mpccl_config_str("ALGO").  NULL when unset and the
 * default is empty.  Aborts loudly on a name missing from the table (a bug). */
const char *mpccl_config_str(const char *name);
/* Integer settings accept k/m/g suffixes (binary).  An unparsable value gets a
 * warning and the default. */
int64_t mpccl_config_int(const char *name);
/* Whether the user set it (MPCCL_ or its alias); a default that depends on
 * the communicator is chosen by the caller when not. */
int mpccl_config_is_set(const char *name);

/* One row of the table, as resolved now. */
typedef struct {
    const char *name;       /* after MPCCL_ */
    const char *nccl_alias; /* the NCCL_ variable that sets it too, or NULL */
    int alias_inverted;     /* the alias means the opposite (NCCL_NVTX_DISABLE=1 is MPCCL_NVTX=0) */
    const char *dflt, *help;
    const char *value;      /* "" when unset without a default */
    const char *source;     /* "MPCCL_", the alias's name, or "default" */
} mpccl_config_entry_t;

/* Fills *out with row i of the table; returns 0, or -1 past the last row. */
int mpccl_config_entry(size_t i, mpccl_config_entry_t *out);

/* Prints the table with current values (mpccl_info, mpccl-perf -h). */
void mpccl_config_print(FILE *out);

/* Reads the environment again (ncclResetDebugInit). */
void mpccl_config_reload(void);

/* Warns once about MPCCL_* variables that are not in the table. */
void mpccl_config_check_environment(void);

#endif
