/* One thread drives every rank of host communicators made by ncclCommInitAll:
 * window registration, puts and waits must be grouped (NCCL's rule for several
 * ranks per thread) and complete at ncclGroupEnd.  Public API only; host
 * communicators (CUDA_VISIBLE_DEVICES is emptied before anything starts). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl.h"
#include "nccl_device.h"

#define N 4
#define BLK 4093 /* bytes per piece, odd */

static unsigned long long seed;

static unsigned char byte(int round, int src, int dst, size_t i)
{
    unsigned long long x = seed + (unsigned long long)round * 1000003u + (unsigned long long)src * 7919u +
                           (unsigned long long)dst * 104729u + i * 2654435761u;
    x ^= x >> 31;
    return (unsigned char)(x * 0x9e3779b97f4a7c15ULL >> 56);
}

START_TEST(grouped_windows_and_all_to_all)
{
    ncclComm_t comms[N];
    ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
    unsigned char *wbuf[N], *src[N];
    ncclWindow_t win[N];
    for (int r = 0; r < N; r++) {
        ck_assert_int_eq(posix_memalign((void **)&wbuf[r], NCCL_WIN_REQUIRED_ALIGNMENT, (size_t)N * BLK), 0);
        memset(wbuf[r], 0, (size_t)N * BLK);
        src[r] = malloc((size_t)N * BLK);
    }
    /* Registration is collective: without a group one thread would wait
     * forever for its other ranks. */
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < N; r++)
        ck_assert_int_eq(ncclCommWindowRegister(comms[r], wbuf[r], (size_t)N * BLK, &win[r], NCCL_WIN_DEFAULT),
                         ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    for (int round = 0; round < 3; round++) {
        for (int r = 0; r < N; r++)
            for (int p = 0; p < N; p++)
                for (size_t i = 0; i < BLK; i++) src[r][(size_t)p * BLK + i] = byte(round, r, p, i);
        /* Waits come first: they run at ncclGroupEnd, after every put. */
        ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
        for (int r = 0; r < N; r++) {
            ncclWaitSignalDesc_t d[N];
            for (int p = 0; p < N; p++) d[p] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = p, .sigIdx = 0, .ctx = round % 4};
            ck_assert_int_eq(ncclWaitSignal(N, d, comms[r], NULL), ncclSuccess);
        }
        for (int r = 0; r < N; r++)
            for (int p = 0; p < N; p++)
                ck_assert_int_eq(ncclPutSignal(src[r] + (size_t)p * BLK, BLK, ncclUint8, p, win[r], (size_t)r * BLK,
                                               0, round % 4, 0, comms[r], NULL),
                                 ncclSuccess);
        ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
        for (int r = 0; r < N; r++)
            for (int p = 0; p < N; p++)
                for (size_t i = 0; i < BLK; i++)
                    ck_assert_msg(wbuf[r][(size_t)p * BLK + i] == byte(round, p, r, i),
                                  "round %d: rank %d, piece from %d, byte %zu: %u, expected %u", round, r, p, i,
                                  wbuf[r][(size_t)p * BLK + i], byte(round, p, r, i));
    }
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommWindowDeregister(comms[r], win[r]), ncclSuccess);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
    for (int r = 0; r < N; r++) {
        free(wbuf[r]);
        free(src[r]);
    }
}
END_TEST

/* Several windows of one communicator registered in one group pair up across
 * ranks in call order, although each registration runs in a thread of its
 * own at ncclGroupEnd: windows of different sizes, and a put at the end of
 * each must land in that window of the peer. */
#define NWIN 3
START_TEST(several_windows_in_one_group)
{
    ncclComm_t comms[N];
    ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
    for (int round = 0; round < 4; round++) {
        unsigned char *wbuf[N][NWIN], *src = malloc(16 * N * NWIN); /* each put its own until the group ends */
        ncclWindow_t win[N][NWIN];
        for (int r = 0; r < N; r++)
            for (int k = 0; k < NWIN; k++) {
                size_t bytes = 4096 * (size_t)(k + 1);
                ck_assert_int_eq(posix_memalign((void **)&wbuf[r][k], NCCL_WIN_REQUIRED_ALIGNMENT, bytes), 0);
                memset(wbuf[r][k], 0, bytes);
            }
        ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
        for (int k = 0; k < NWIN; k++)
            for (int r = 0; r < N; r++)
                ck_assert_int_eq(ncclCommWindowRegister(comms[r], wbuf[r][k], 4096 * (size_t)(k + 1), &win[r][k],
                                                        NCCL_WIN_COLL_SYMMETRIC),
                                 ncclSuccess);
        ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
        ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
        for (int r = 0; r < N; r++) {
            ncclWaitSignalDesc_t d = {.opCnt = NWIN, .peer = (r + N - 1) % N, .sigIdx = 0, .ctx = 0};
            ck_assert_int_eq(ncclWaitSignal(1, &d, comms[r], NULL), ncclSuccess);
        }
        for (int r = 0; r < N; r++)
            for (int k = 0; k < NWIN; k++) {
                unsigned char *piece = src + 16 * (r * NWIN + k);
                for (int i = 0; i < 16; i++) piece[i] = byte(round, r, k, (size_t)i);
                ck_assert_int_eq(ncclPutSignal(piece, 16, ncclUint8, (r + 1) % N, win[r][k],
                                               4096 * (size_t)(k + 1) - 16, 0, 0, 0, comms[r], NULL),
                                 ncclSuccess);
            }
        ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
        for (int r = 0; r < N; r++)
            for (int k = 0; k < NWIN; k++) {
                const unsigned char *tail = wbuf[r][k] + 4096 * (size_t)(k + 1) - 16;
                for (int i = 0; i < 16; i++)
                    ck_assert_msg(tail[i] == byte(round, (r + N - 1) % N, k, (size_t)i),
                                  "round %d: rank %d window %d byte %d: %u, expected %u", round, r, k, i, tail[i],
                                  byte(round, (r + N - 1) % N, k, (size_t)i));
            }
        for (int r = 0; r < N; r++)
            for (int k = 0; k < NWIN; k++) {
                ck_assert_int_eq(ncclCommWindowDeregister(comms[r], win[r][k]), ncclSuccess);
                free(wbuf[r][k]);
            }
        free(src);
    }
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

/* The host side of the device API on host communicators: every rank is its
 * own LSA team, window pointers exist only for this rank, and device
 * communicators are refused with a message (they need a GPU). */
START_TEST(device_api_on_host_comms)
{
    ncclComm_t comms[N];
    ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
    ncclTeam_t world = ncclTeamWorld(comms[2]), lsa = ncclTeamLsa(comms[2]);
    ck_assert_int_eq(world.nRanks, N);
    ck_assert_int_eq(world.rank, 2);
    ck_assert_int_eq(lsa.nRanks, 1);
    ck_assert_int_eq(lsa.rank, 0);
    ncclTeam_t rail = ncclTeamRail(comms[2]); /* teams of one: the rail is everybody */
    ck_assert(rail.nRanks == N && rail.rank == 2 && rail.stride == 1);
    ck_assert_int_eq(ncclTeamRankToWorld(comms[2], world, 3), 3);
    ck_assert_int_eq(ncclTeamRankToLsa(comms[2], world, 2), 0);
    ck_assert_int_eq(ncclTeamRankToLsa(comms[2], world, 3), -1);
    ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;
    ck_assert_int_eq(ncclCommQueryProperties(comms[0], &props), ncclSuccess);
    ck_assert(!props.deviceApiSupport);
    ck_assert_int_eq(props.nLsaTeams, N);

    ncclDevCommRequirements_t reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    reqs.lsaBarrierCount = 4;
    ncclDevComm_t dev;
    ck_assert_int_eq(ncclDevCommCreate(comms[0], &reqs, &dev), ncclInvalidUsage);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(comms[0]), "host communicator"));
    reqs.magic = 0;
    ck_assert_int_eq(ncclDevCommCreate(comms[0], &reqs, &dev), ncclInvalidArgument);
    ck_assert_int_eq(ncclDevCommCreate(comms[0], NULL, &dev), ncclInvalidArgument);

    unsigned char *wbuf[N];
    ncclWindow_t win[N];
    for (int r = 0; r < N; r++)
        ck_assert_int_eq(posix_memalign((void **)&wbuf[r], NCCL_WIN_REQUIRED_ALIGNMENT, 4096), 0);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < N; r++)
        ck_assert_int_eq(ncclCommWindowRegister(comms[r], wbuf[r], 4096, &win[r], NCCL_WIN_COLL_SYMMETRIC),
                         ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    void *p = NULL;
    ck_assert_int_eq(ncclGetLsaDevicePointer(win[1], 16, 0, &p), ncclSuccess);
    ck_assert_ptr_eq(p, wbuf[1] + 16);
    ck_assert_int_eq(ncclGetLsaDevicePointer(win[1], 16, 1, &p), ncclInvalidArgument);
    ck_assert_int_eq(ncclGetPeerDevicePointer(win[1], 0, 1, &p), ncclSuccess);
    ck_assert_ptr_eq(p, wbuf[1]);
    ck_assert_int_eq(ncclGetPeerDevicePointer(win[1], 0, 2, &p), ncclSuccess);
    ck_assert_ptr_null(p); /* another rank's memory: not reachable by load/store */
    ck_assert_int_eq(ncclGetLsaMultimemDevicePointer(win[1], 0, &p), ncclSuccess);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(ncclGetLsaDevicePointer(win[1], 5000, 0, &p), ncclInvalidArgument);
    ck_assert_int_eq(ncclGetLsaDevicePointer((ncclWindow_t)wbuf[0], 0, 0, &p), ncclInvalidArgument);
    for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommWindowDeregister(comms[r], win[r]), ncclSuccess);
    ck_assert_int_eq(ncclGetLsaDevicePointer(win[1], 0, 0, &p), ncclInvalidArgument); /* deregistered */
    for (int r = 0; r < N; r++) {
        ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
        free(wbuf[r]);
    }
}
END_TEST

int main(void)
{
    setenv("CUDA_VISIBLE_DEVICES", "", 1); /* host communicators */
    const char *s = getenv("MPCCL_TEST_SEED");
    seed = s ? strtoull(s, NULL, 0) : (unsigned long long)time(NULL);
    printf("test_onesided_inproc: seed %llu (MPCCL_TEST_SEED to repeat)\n", seed);
    Suite *su = suite_create("onesided_inproc");
    TCase *tc = tcase_create("grouped");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, grouped_windows_and_all_to_all);
    tcase_add_test(tc, device_api_on_host_comms);
    tcase_add_test(tc, several_windows_in_one_group);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
