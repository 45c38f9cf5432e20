/* Placing a thread near a PCI device (cpu_affinity.h). */
#define _GNU_SOURCE
#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cpu_affinity.h"

_Static_assert(sizeof(cpu_set_t) >= sizeof(unsigned long long) * MPCCL_CPU_MASK_WORDS,
               "cpu_set_t holds the mask");

int mpccl_cpulist_parse(const char *s, unsigned long long mask[MPCCL_CPU_MASK_WORDS])
{
    memset(mask, 0, sizeof(unsigned long long) * MPCCL_CPU_MASK_WORDS);
    int n = 0;
    const char *p = s;
    while (*p && *p != '\n') {
        char *end;
        if (!isdigit((unsigned char)*p)) return -1;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            if (!isdigit((unsigned char)p[1])) return -1;
            hi = strtoul(p + 1, &end, 10);
            p = end;
        }
        if (hi < lo || hi >= 64u * MPCCL_CPU_MASK_WORDS) return -1;
        for (unsigned long c = lo; c <= hi; c++) {
            if (!(mask[c / 64] >> (c % 64) & 1ull)) n++;
            mask[c / 64] |= 1ull << (c % 64);
        }
        if (*p == ',') p++;
        else if (*p && *p != '\n') return -1;
    }
    return n;
}

/* sysfs's local CPU list of busid; 0 when it has none. */
static int read_local(const char *busid, unsigned long long mask[MPCCL_CPU_MASK_WORDS])
{
    char id[32], path[96], line[1024];
    size_t n = strlen(busid);
    if (n == 0 || n >= sizeof(id)) return 0;
    for (size_t i = 0; i <= n; i++) id[i] = (char)tolower((unsigned char)busid[i]);
    const char *colon = strchr(id, ':');
    for (int attempt = 0; attempt < 2; attempt++) {
        /* sysfs names the domain with 4 digits; an 8-digit one (nvidia-smi's form) is cut */
        const char *name = attempt == 0 ? id : (colon && colon - id == 8 ? id + 4 : NULL);
        if (!name) break;
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/local_cpulist", name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int ok = fgets(line, sizeof(line), f) != NULL;
        fclose(f);
        return ok && mpccl_cpulist_parse(line, mask) > 0;
    }
    return 0;
}

static void to_set(const unsigned long long mask[MPCCL_CPU_MASK_WORDS], cpu_set_t *set)
{
    CPU_ZERO(set);
    for (unsigned c = 0; c < 64u * MPCCL_CPU_MASK_WORDS && c < CPU_SETSIZE; c++)
        if (mask[c / 64] >> (c % 64) & 1ull) CPU_SET(c, set);
}

static void from_set(const cpu_set_t *set, unsigned long long mask[MPCCL_CPU_MASK_WORDS])
{
    memset(mask, 0, sizeof(unsigned long long) * MPCCL_CPU_MASK_WORDS);
    for (unsigned c = 0; c < 64u * MPCCL_CPU_MASK_WORDS && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set)) mask[c / 64] |= 1ull << (c % 64);
}

/* mask as a CPU list, for the log. */
static void list_of(const unsigned long long mask[MPCCL_CPU_MASK_WORDS], char *out, unsigned len)
{
    unsigned used = 0;
    out[0] = '\0';
    for (unsigned c = 0; c < 64u * MPCCL_CPU_MASK_WORDS && used + 16 < len;) {
        if (!(mask[c / 64] >> (c % 64) & 1ull)) {
            c++;
            continue;
        }
        unsigned e = c;
        while (e + 1 < 64u * MPCCL_CPU_MASK_WORDS && (mask[(e + 1) / 64] >> ((e + 1) % 64) & 1ull)) e++;
        used += (unsigned)snprintf(out + used, len - used, used ? ",%u" : "%u", c);
        if (e > c) used += (unsigned)snprintf(out + used, len - used, "-%u", e);
        c = e + 1;
    }
}

void mpccl_cpu_affinity_near(const char *busid, mpccl_cpu_affinity_t *a, char *where, unsigned where_len)
{
    memset(a, 0, sizeof(*a));
    if (where && where_len) where[0] = '\0';
    unsigned long long local[MPCCL_CPU_MASK_WORDS], both[MPCCL_CPU_MASK_WORDS];
    cpu_set_t now;
    if (!busid || !read_local(busid, local) || sched_getaffinity(0, sizeof(now), &now) != 0) return;
    from_set(&now, a->saved);
    int any = 0, differs = 0;
    for (int w = 0; w < MPCCL_CPU_MASK_WORDS; w++) {
        both[w] = local[w] & a->saved[w];
        any |= both[w] != 0;
        differs |= both[w] != a->saved[w];
    }
    if (!any || !differs) return;
    cpu_set_t set;
    to_set(both, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) return;
    a->active = 1;
    if (where && where_len) list_of(both, where, where_len);
}

void mpccl_cpu_affinity_restore(mpccl_cpu_affinity_t *a)
{
    if (!a->active) return;
    cpu_set_t set;
    to_set(a->saved, &set);
    (void)sched_setaffinity(0, sizeof(set), &set);
    a->active = 0;
}
