/* Placing a thread near a PCI device (a GPU): on the CPUs its sysfs entry
 * names local (local_cpulist), as NCCL places its proxy threads and host
 * buffers.  Threads started meanwhile inherit the placement, and memory the
 * thread touches first (pinned staging) lands on their NUMA node, so the
 * device's reads and writes of it and the proxy's polling stay on one
 * socket. */
#ifndef MPCCL_CPU_AFFINITY_H
#define MPCCL_CPU_AFFINITY_H

#define MPCCL_CPU_MASK_WORDS 16 /* CPUs 0..1023 */

typedef struct mpccl_cpu_affinity {
    int active; /* the calling thread was moved: restore puts it back */
    unsigned long long saved[MPCCL_CPU_MASK_WORDS];
} mpccl_cpu_affinity_t;

/* Parses a Linux CPU list ("0-3,8,10-11\n") into mask; -1 when malformed or
 * naming a CPU over 1023, else the number of CPUs. */
int mpccl_cpulist_parse(const char *s, unsigned long long mask[MPCCL_CPU_MASK_WORDS]);

/* Binds the calling thread to the CPUs local to PCI device busid ("0000:3b:00.0",
 * any case, a domain of 4 or 8 digits) that it may run on already.  Leaves it
 * where it is (a->active = 0) when sysfs does not say, or the two sets do not
 * meet (a rank bound elsewhere by its launcher), or they are the same.
 * where (may be NULL) receives the CPU list used, for the log. */
void mpccl_cpu_affinity_near(const char *busid, mpccl_cpu_affinity_t *a, char *where, unsigned where_len);
/* Puts the calling thread back where near() found it. */
void mpccl_cpu_affinity_restore(mpccl_cpu_affinity_t *a);

#endif
