/* The stall watch's arithmetic (lib/core/stall_track.c): looks about once a
 * second at a kernel's wait record, as the side channel's thread makes them. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "core/stall_watch.h"

START_TEST(no_wait_is_no_stall)
{
    mpccl_stall_track_t t;
    memset(&t, 0, sizeof(t));
    for (int64_t ms = 0; ms < 100000; ms += 1000) ck_assert(mpccl_stall_observe(&t, 0, 0, ms) == 0);
    /* a record but no launch number: nothing to go by */
    ck_assert(mpccl_stall_observe(&t, 0, 123, 100000) == 0);
}
END_TEST

START_TEST(a_wait_that_lasts_grows)
{
    mpccl_stall_track_t t;
    memset(&t, 0, sizeof(t));
    uint64_t stamp = 1000;
    ck_assert(mpccl_stall_observe(&t, 6, stamp, 0) == 0); /* first seen */
    for (int s = 1; s <= 60; s++) {
        stamp += 1000000000ull; /* the kernel rewrites it while it spins */
        ck_assert(mpccl_stall_observe(&t, 6, stamp, s * 1000) == (double)s);
    }
}
END_TEST

START_TEST(a_new_launch_starts_over)
{
    mpccl_stall_track_t t;
    memset(&t, 0, sizeof(t));
    uint64_t stamp = 1;
    for (int s = 0; s <= 30; s++) mpccl_stall_observe(&t, 6, stamp += 7, s * 1000);
    ck_assert(mpccl_stall_observe(&t, 6, stamp += 7, 31000) == 31.0);
    /* launch 7 waits now: launch 6 moved on */
    ck_assert(mpccl_stall_observe(&t, 7, stamp += 7, 32000) == 0);
    ck_assert(mpccl_stall_observe(&t, 7, stamp += 7, 33000) == 1.0);
}
END_TEST

START_TEST(a_still_record_is_over)
{
    mpccl_stall_track_t t;
    memset(&t, 0, sizeof(t));
    uint64_t stamp = 5;
    for (int s = 0; s <= 10; s++) mpccl_stall_observe(&t, 3, stamp += 1, s * 1000);
    /* nobody rewrote it for longer than MPCCL_STALL_STILL_MS: the launch
     * finished (the record keeps its last values) */
    ck_assert(mpccl_stall_observe(&t, 3, stamp, 10000 + MPCCL_STALL_STILL_MS / 2) > 0);
    ck_assert(mpccl_stall_observe(&t, 3, stamp, 10000 + MPCCL_STALL_STILL_MS + 1) == 0);
    ck_assert(mpccl_stall_observe(&t, 3, stamp, 60000) == 0);
    /* the same launch waits again later (another CTA): counted from then */
    ck_assert(mpccl_stall_observe(&t, 3, stamp + 1, 61000) == 1.0);
    ck_assert(mpccl_stall_observe(&t, 3, stamp + 2, 65000) == 5.0);
}
END_TEST

START_TEST(a_look_missed_is_not_a_pause)
{
    /* The side channel's thread may be late (a loaded machine): a gap between
     * looks with the stamp moving is still one wait. */
    mpccl_stall_track_t t;
    memset(&t, 0, sizeof(t));
    mpccl_stall_observe(&t, 9, 10, 0);
    ck_assert(mpccl_stall_observe(&t, 9, 20, 15000) == 15.0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stall_track");
    TCase *tc = tcase_create("observe");
    tcase_add_test(tc, no_wait_is_no_stall);
    tcase_add_test(tc, a_wait_that_lasts_grows);
    tcase_add_test(tc, a_new_launch_starts_over);
    tcase_add_test(tc, a_still_record_is_over);
    tcase_add_test(tc, a_look_missed_is_not_a_pause);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
