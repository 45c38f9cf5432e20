/* The shared-device decision (lib/gpu/gpu_shared_route.c) over faked
 * topologies: which communicators take the leader path, which keep the usual
 * kernels, and what the log line says. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "gpu/gpu_shared_route.h"

/* Rank r on host h, GPU g, process p, MPS m. */
static void ident(mpccl_dev_ident_t *id, uint64_t h, int g, int p, int m)
{
    memset(id, 0, sizeof(*id));
    id->host_hash = h;
    id->uuid[0] = (unsigned char)g;
    id->uuid[15] = 0x5a;
    id->pid = p;
    id->mps = m;
}

static mpccl_shared_route_t route(const mpccl_dev_ident_t *ids, int n, const char *setting, char *why)
{
    mpccl_shared_route_t r;
    ck_assert_int_eq(mpccl_shared_route(ids, n, setting, &r, why, 320), MPCCL_OK);
    return r;
}

START_TEST(one_process_per_gpu_is_none)
{
    mpccl_dev_ident_t ids[4];
    char why[320];
    for (int r = 0; r < 4; r++) ident(&ids[r], 1, r, 100 + r, 0);
    ck_assert_int_eq(route(ids, 4, NULL, why).mode, MPCCL_SHARED_NONE);
    /* several ranks of one process on one GPU share a context: no time-slicing */
    for (int r = 0; r < 4; r++) ident(&ids[r], 1, 0, 100, 0);
    ck_assert_int_eq(route(ids, 4, NULL, why).mode, MPCCL_SHARED_NONE);
    /* the same GPU index on two hosts is two GPUs */
    ident(&ids[0], 1, 0, 100, 0);
    ident(&ids[1], 2, 0, 100, 0);
    ck_assert_int_eq(route(ids, 2, NULL, why).mode, MPCCL_SHARED_NONE);
}
END_TEST

START_TEST(sharing_without_mps_takes_the_leader)
{
    mpccl_dev_ident_t ids[4];
    char why[320];
    for (int n = 2; n <= 4; n++) {
        for (int r = 0; r < n; r++) ident(&ids[r], 7, 3, 200 + r, 0);
        mpccl_shared_route_t rt = route(ids, n, NULL, why);
        ck_assert_int_eq(rt.mode, MPCCL_SHARED_LEADER);
        ck_assert_int_eq(rt.leader, 0);
        ck_assert_int_eq(rt.max_procs, n);
        ck_assert_ptr_nonnull(strstr(why, "MPS off"));
        ck_assert_ptr_nonnull(strstr(why, "leader") ? why : strstr(why, "rank 0"));
    }
    /* unknown MPS state counts as off */
    for (int r = 0; r < 2; r++) ident(&ids[r], 7, 3, 200 + r, -1);
    ck_assert_int_eq(route(ids, 2, "auto", why).mode, MPCCL_SHARED_LEADER);
    /* two processes with two ranks each, all on one GPU */
    for (int r = 0; r < 4; r++) ident(&ids[r], 7, 3, 200 + r / 2, 0);
    mpccl_shared_route_t rt = route(ids, 4, NULL, why);
    ck_assert_int_eq(rt.mode, MPCCL_SHARED_LEADER);
    ck_assert_int_eq(rt.max_procs, 2);
}
END_TEST

START_TEST(mps_keeps_the_kernels)
{
    mpccl_dev_ident_t ids[3];
    char why[320];
    for (int r = 0; r < 3; r++) ident(&ids[r], 7, 3, 300 + r, 1);
    mpccl_shared_route_t rt = route(ids, 3, NULL, why);
    ck_assert_int_eq(rt.mode, MPCCL_SHARED_TOGETHER);
    ck_assert_int_eq(rt.mps_off, 0);
    ck_assert_ptr_nonnull(strstr(why, "MPS on"));
    /* forced */
    ck_assert_int_eq(route(ids, 3, "leader", why).mode, MPCCL_SHARED_LEADER);
    /* one client without MPS is enough to time-slice */
    ids[2].mps = 0;
    ck_assert_int_eq(route(ids, 3, NULL, why).mode, MPCCL_SHARED_LEADER);
}
END_TEST

START_TEST(partial_sharing_is_sliced_and_said)
{
    /* 4 ranks on 2 GPUs, 2 processes each, no MPS */
    mpccl_dev_ident_t ids[4];
    char why[320];
    for (int r = 0; r < 4; r++) ident(&ids[r], 7, r / 2, 400 + r, 0);
    mpccl_shared_route_t rt = route(ids, 4, NULL, why);
    ck_assert_int_eq(rt.mode, MPCCL_SHARED_SLICED);
    ck_assert_int_eq(rt.max_procs, 2);
    ck_assert_ptr_nonnull(strstr(why, "several GPUs"));
    ck_assert_ptr_nonnull(strstr(why, "nvidia-cuda-mps-control"));
    /* the same with MPS: together */
    for (int r = 0; r < 4; r++) ids[r].mps = 1;
    ck_assert_int_eq(route(ids, 4, NULL, why).mode, MPCCL_SHARED_TOGETHER);
}
END_TEST

START_TEST(forcing_and_bad_settings)
{
    mpccl_dev_ident_t ids[2];
    char why[320];
    for (int r = 0; r < 2; r++) ident(&ids[r], 7, 3, 500 + r, 0);
    ck_assert_int_eq(route(ids, 2, "kernels", why).mode, MPCCL_SHARED_SLICED);
    ck_assert_ptr_nonnull(strstr(why, "MPCCL_SHARED_GPU=kernels"));
    mpccl_shared_route_t rt;
    ck_assert_int_eq(mpccl_shared_route(ids, 2, "sometimes", &rt, why, sizeof why), MPCCL_ERR_USAGE);
    /* too many ranks for one launch's tables: the usual kernels */
    mpccl_dev_ident_t many[MPCCL_SHARED_MAX_LEADER_RANKS + 1];
    for (int r = 0; r <= MPCCL_SHARED_MAX_LEADER_RANKS; r++) ident(&many[r], 7, 3, 600 + r, 0);
    ck_assert_int_eq(route(many, MPCCL_SHARED_MAX_LEADER_RANKS + 1, NULL, why).mode, MPCCL_SHARED_SLICED);
    ck_assert_int_eq(route(many, MPCCL_SHARED_MAX_LEADER_RANKS, NULL, why).mode, MPCCL_SHARED_LEADER);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shared_route");
    TCase *tc = tcase_create("route");
    tcase_add_test(tc, one_process_per_gpu_is_none);
    tcase_add_test(tc, sharing_without_mps_takes_the_leader);
    tcase_add_test(tc, mps_keeps_the_kernels);
    tcase_add_test(tc, partial_sharing_is_sliced_and_said);
    tcase_add_test(tc, forcing_and_bad_settings);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
