/* Placing a thread near a PCI device (util/cpu_affinity.h): the CPU-list
 * parser on good and malformed lists, a device sysfs does not know (the
 * thread stays), and, where this machine names one, a real PCI device's
 * local CPUs: the thread moves onto them and back. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cpu_affinity.h"

static int has(const unsigned long long *m, unsigned c) { return (int)(m[c / 64] >> (c % 64) & 1ull); }

START_TEST(test_parse)
{
    unsigned long long m[MPCCL_CPU_MASK_WORDS];
    ck_assert_int_eq(mpccl_cpulist_parse("0-3,8,10-11\n", m), 7);
    ck_assert(has(m, 0) && has(m, 3) && !has(m, 4) && has(m, 8) && !has(m, 9) && has(m, 11) && !has(m, 12));
    ck_assert_int_eq(mpccl_cpulist_parse("5", m), 1);
    ck_assert(has(m, 5));
    ck_assert_int_eq(mpccl_cpulist_parse("64-65,1023", m), 3);
    ck_assert(has(m, 64) && has(m, 65) && has(m, 1023));
    ck_assert_int_eq(mpccl_cpulist_parse("0-1,1-2", m), 3); /* overlaps count once */
    ck_assert_int_eq(mpccl_cpulist_parse("", m), 0);
    ck_assert_int_eq(mpccl_cpulist_parse("3-1", m), -1);
    ck_assert_int_eq(mpccl_cpulist_parse("1024", m), -1);
    ck_assert_int_eq(mpccl_cpulist_parse("a", m), -1);
    ck_assert_int_eq(mpccl_cpulist_parse("1-", m), -1);
    ck_assert_int_eq(mpccl_cpulist_parse("1;2", m), -1);
}
END_TEST

START_TEST(test_unknown_device)
{
    cpu_set_t before, after;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(before), &before), 0);
    mpccl_cpu_affinity_t a;
    char where[64] = "x";
    mpccl_cpu_affinity_near("ffff:ff:1f.7", &a, where, sizeof(where));
    ck_assert_int_eq(a.active, 0);
    ck_assert_str_eq(where, "");
    mpccl_cpu_affinity_near(NULL, &a, NULL, 0);
    ck_assert_int_eq(a.active, 0);
    mpccl_cpu_affinity_restore(&a);
    ck_assert_int_eq(sched_getaffinity(0, sizeof(after), &after), 0);
    ck_assert(CPU_EQUAL(&before, &after));
}
END_TEST

/* A PCI device of this machine whose local CPUs are a strict, non-empty part of
 * this thread's (a multi-socket machine), in its uppercase form; 0 if none. */
static int pick_device(char *busid, size_t len, unsigned long long *local)
{
    DIR *d = opendir("/sys/bus/pci/devices");
    if (!d) return 0;
    cpu_set_t now;
    if (sched_getaffinity(0, sizeof(now), &now) != 0) {
        closedir(d);
        return 0;
    }
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[512], line[1024];
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/local_cpulist", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int ok = fgets(line, sizeof(line), f) != NULL;
        fclose(f);
        if (!ok || mpccl_cpulist_parse(line, local) <= 0) continue;
        int inside = 0, outside = 0;
        for (unsigned c = 0; c < 64u * MPCCL_CPU_MASK_WORDS && c < CPU_SETSIZE; c++) {
            if (!CPU_ISSET(c, &now)) continue;
            if (has(local, c)) inside++;
            else outside++;
        }
        if (inside && outside && strlen(e->d_name) < len) {
            memcpy(busid, e->d_name, strlen(e->d_name) + 1);
            for (char *p = busid; *p; p++)
                if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
            found = 1;
        }
    }
    closedir(d);
    return found;
}

START_TEST(test_real_device)
{
    char busid[64];
    unsigned long long local[MPCCL_CPU_MASK_WORDS];
    if (!pick_device(busid, sizeof(busid), local)) {
        printf("test_cpu_affinity: no PCI device here is local to only part of the CPUs (one NUMA node): "
               "nothing to move\n");
        return;
    }
    cpu_set_t before, during, after;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(before), &before), 0);
    mpccl_cpu_affinity_t a;
    char where[256];
    mpccl_cpu_affinity_near(busid, &a, where, sizeof(where));
    ck_assert_int_eq(a.active, 1);
    ck_assert(where[0] != '\0');
    ck_assert_int_eq(sched_getaffinity(0, sizeof(during), &during), 0);
    for (unsigned c = 0; c < 64u * MPCCL_CPU_MASK_WORDS && c < CPU_SETSIZE; c++)
        ck_assert_int_eq(CPU_ISSET(c, &during) != 0, CPU_ISSET(c, &before) && has(local, c));
    mpccl_cpu_affinity_restore(&a);
    ck_assert_int_eq(sched_getaffinity(0, sizeof(after), &after), 0);
    ck_assert(CPU_EQUAL(&before, &after));
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("cpu_affinity");
    TCase *tc = tcase_create("near a device");
    tcase_add_test(tc, test_parse);
    tcase_add_test(tc, test_unknown_device);
    tcase_add_test(tc, test_real_device);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
