/* mpccl-info: what this mpccl is and what it finds: its version and NCCL API
 * level, the CUDA and UCX it was built with and runs with, the GPUs and how
 * they connect, UCX's transports, and every setting with its value and where
 * the value came from.  --json prints the same as one JSON object. */
#include <stdio.h>
#include <string.h>

#include "build_config.h"
#include "nccl.h"
#include "util/config.h"
#include "info_parts.h"

void info_settings(info_out_t *o)
{
    mpccl_config_entry_t e;
    char var[96];
    info_out_list(o, "settings");
    for (size_t i = 0; mpccl_config_entry(i, &e) == 0; i++) {
        info_out_object(o, NULL);
        snprintf(var, sizeof(var), "MPCCL_%s", e.name);
        info_out_str(o, "name", var);
        info_out_str(o, "value", e.value);
        /* "MPCCL_" -> the variable's full name; an alias keeps its name */
        info_out_str(o, "source", strcmp(e.source, "MPCCL_") ? e.source : var);
        info_out_str(o, "default", e.dflt);
        info_out_str(o, "nccl_alias", e.nccl_alias);
        if (o->json) {
            info_out_bool(o, "alias_inverted", e.alias_inverted);
            info_out_str(o, "help", e.help);
        }
        info_out_close(o);
    }
    info_out_close(o);
}

static void info_version(info_out_t *o)
{
    char buf[32];
    info_out_str(o, "mpccl_version", PACKAGE_VERSION);
    snprintf(buf, sizeof(buf), "%d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    info_out_str(o, "nccl_api_version", buf);
    info_out_int(o, "nccl_version_code", NCCL_VERSION_CODE);
}

static int usage(FILE *f)
{
    fprintf(f, "usage: mpccl-info [--json]\n"
               "  Prints mpccl's version and NCCL API level, the CUDA and UCX it was built with and\n"
               "  runs with, the GPUs with their P2P matrix and NVLinks, UCX's transports and\n"
               "  devices, and every MPCCL_ setting with its value and source.\n"
               "  --json  the same as one JSON object\n");
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        else {
            fprintf(stderr, "mpccl-info: unknown argument '%s'\n", argv[i]);
            return usage(stderr);
        }
    }
    info_out_t o;
    info_out_begin(&o, stdout, json);
    info_version(&o);
    info_gpu(&o);
    info_ucx(&o);
    info_settings(&o);
    info_out_end(&o);
    return ferror(stdout) ? 1 : 0;
}
