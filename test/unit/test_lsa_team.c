/* The LSA team rule (lib/gpu/gpu_lsa_team.c): the expected teams for the usual
 * layouts, and for random P2P matrices (asymmetric ones included, as a
 * misreporting driver could give) that the teams every rank picks partition
 * the ranks: a rank's team contains it, and every member picks the same team. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu/gpu_lsa_team.h"

#define MAXN 24

/* reach[i][j]: rank i's GPU reaches rank j's memory. */
static void teams(int n, unsigned char reach[MAXN][MAXN], int *first, int *size)
{
    int32_t runs[2 * MAXN];
    for (int r = 0; r < n; r++) mpccl_lsa_candidate(n, r, reach[r], &runs[2 * r], &runs[2 * r + 1]);
    for (int r = 0; r < n; r++) mpccl_lsa_pick(n, r, runs, &first[r], &size[r]);
}

/* Ranks on nodes of `per` consecutive ranks, P2P inside a node. */
static void nodes(int n, int per, unsigned char reach[MAXN][MAXN])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) reach[i][j] = i / per == j / per;
}

START_TEST(usual_layouts)
{
    unsigned char reach[MAXN][MAXN];
    int first[MAXN], size[MAXN];
    nodes(8, 8, reach); /* one node */
    teams(8, reach, first, size);
    for (int r = 0; r < 8; r++) ck_assert(first[r] == 0 && size[r] == 8);
    nodes(8, 4, reach); /* two nodes of four */
    teams(8, reach, first, size);
    for (int r = 0; r < 8; r++) ck_assert(first[r] == r / 4 * 4 && size[r] == 4);
    nodes(6, 1, reach); /* no P2P at all */
    teams(6, reach, first, size);
    for (int r = 0; r < 6; r++) ck_assert(first[r] == r && size[r] == 1);
    /* Round-robin placement (ranks of a node not consecutive): teams of one. */
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) reach[i][j] = i % 2 == j % 2;
    teams(8, reach, first, size);
    for (int r = 0; r < 8; r++) ck_assert(first[r] == r && size[r] == 1);
    /* One pair without P2P in a node of four: ranks 0 and 3 see runs 0..3,
     * ranks 1 and 2 see 0..1 and 2..3; nobody's run is everybody's, so the
     * rule (conservative) leaves every rank alone. */
    nodes(4, 4, reach);
    reach[1][2] = reach[2][1] = 0;
    teams(4, reach, first, size);
    for (int r = 0; r < 4; r++) ck_assert(first[r] == r && size[r] == 1);
}
END_TEST

START_TEST(random_matrices_partition)
{
    srand(20261122);
    unsigned char reach[MAXN][MAXN];
    int first[MAXN], size[MAXN];
    for (int iter = 0; iter < 5000; iter++) {
        int n = 1 + rand() % MAXN;
        int dense = rand() % 4;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) reach[i][j] = i == j || rand() % 4 < dense;
        teams(n, reach, first, size);
        for (int r = 0; r < n; r++) {
            ck_assert_int_ge(size[r], 1);
            ck_assert(first[r] <= r && r < first[r] + size[r] && first[r] + size[r] <= n);
            for (int m = first[r]; m < first[r] + size[r]; m++) {
                ck_assert_int_eq(first[m], first[r]);
                ck_assert_int_eq(size[m], size[r]);
                ck_assert(reach[r][m]); /* a member reaches every other member */
            }
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lsa_team");
    TCase *tc = tcase_create("rule");
    /* Check's default 4 s is no bound on a loaded 2-core machine: this
     * checks results, not time. */
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, usual_layouts);
    tcase_add_test(tc, random_matrices_partition);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
