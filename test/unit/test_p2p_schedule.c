/* The cut of large send/recv groups into launches (lib/algo/algo_p2p_schedule.c): on
 * random groups of matched messages, every launch fits the table, the two
 * ends of every message get the same key, and a simulation in which a call
 * finishes only while its partner's launch runs (a message larger than any
 * staging) finishes every launch -- where cutting in program order, the
 * simulation's own check, deadlocks. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "algo/algo_p2p_schedule.h"

#define MAXN 70
#define MAXC 600

typedef struct {
    int n;
    int ncalls[MAXN];
    mpccl_p2p_call_ref_t call[MAXN][MAXC];
    int partner[MAXN][MAXC]; /* index of the matching call on the peer */
    int launch[MAXN][MAXC];  /* launch number of each call */
    int nlaunch[MAXN];
} group_t;

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

/* Random matched messages; each rank's calls in a random program order. */
static void make_group(group_t *g, int n, unsigned *seed, int max_per_channel)
{
    g->n = n;
    for (int r = 0; r < n; r++) g->ncalls[r] = 0;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            int c = (int)(rnd(seed) % (unsigned)(max_per_channel + 1));
            if (n > 8 && rnd(seed) % 3 == 0) c = 0; /* sparse patterns too */
            for (int k = 0; k < c && g->ncalls[a] < MAXC && g->ncalls[b] < MAXC; k++) {
                g->call[a][g->ncalls[a]++] = (mpccl_p2p_call_ref_t){.peer = b, .send = 1};
                g->call[b][g->ncalls[b]++] = (mpccl_p2p_call_ref_t){.peer = a, .send = 0};
            }
        }
    for (int r = 0; r < n; r++) /* shuffle: the order inside a channel does not change what pairs */
        for (int i = g->ncalls[r] - 1; i > 0; i--) {
            int j = (int)(rnd(seed) % (unsigned)(i + 1));
            mpccl_p2p_call_ref_t t = g->call[r][i];
            g->call[r][i] = g->call[r][j];
            g->call[r][j] = t;
        }
    /* the k-th send a->b pairs with the k-th receive at b from a */
    for (int a = 0; a < n; a++)
        for (int i = 0; i < g->ncalls[a]; i++) {
            mpccl_p2p_call_ref_t c = g->call[a][i];
            int k = 0;
            for (int j = 0; j < i; j++) k += g->call[a][j].peer == c.peer && g->call[a][j].send == c.send;
            int b = c.peer, found = -1;
            for (int j = 0, m = 0; j < g->ncalls[b] && found < 0; j++)
                if (g->call[b][j].peer == a && g->call[b][j].send == !c.send && m++ == k) found = j;
            ck_assert_int_ge(found, 0);
            g->partner[a][i] = found;
        }
}

/* 1: every launch finishes when a call needs its partner's launch running. */
static int runs_through(const group_t *g)
{
    int cur[MAXN] = {0}, progress = 1;
    while (progress) {
        progress = 0;
        for (int r = 0; r < g->n; r++) {
            if (cur[r] >= g->nlaunch[r]) continue;
            int ok = 1;
            for (int i = 0; i < g->ncalls[r] && ok; i++) {
                if (g->launch[r][i] != cur[r]) continue;
                int p = g->call[r][i].peer, pl = g->launch[p][g->partner[r][i]];
                ok = cur[p] >= pl; /* the partner's launch runs or ran */
            }
            if (ok) {
                cur[r]++;
                progress = 1;
            }
        }
    }
    for (int r = 0; r < g->n; r++)
        if (cur[r] < g->nlaunch[r]) return 0;
    return 1;
}

static void schedule(group_t *g, int table)
{
    static int order[MAXC];
    static uint64_t key[MAXC];
    for (int r = 0; r < g->n; r++) {
        int m = g->ncalls[r];
        int launches = mpccl_p2p_schedule(r, g->n, g->call[r], m, table, order, key);
        ck_assert_int_ge(launches, m ? 1 : 0);
        int l = -1, in_launch = 0;
        for (int i = 0; i < m; i++) {
            if (i == 0 || key[i] != key[i - 1]) {
                ck_assert(i == 0 || key[i] > key[i - 1]);
                l++;
                in_launch = 0;
            } else {
                ck_assert_int_gt(order[i], order[i - 1]); /* program order inside a launch */
            }
            ck_assert_int_le(++in_launch, table);
            g->launch[r][order[i]] = l;
        }
        ck_assert_int_eq(l + 1, launches);
        g->nlaunch[r] = launches;
    }
}

static void cut_in_program_order(group_t *g, int table)
{
    for (int r = 0; r < g->n; r++) {
        for (int i = 0; i < g->ncalls[r]; i++) g->launch[r][i] = i / table;
        g->nlaunch[r] = (g->ncalls[r] + table - 1) / table;
    }
}

START_TEST(random_groups_finish)
{
    static group_t g;
    static const int tables[] = {61, 2, 3, 7};
    unsigned seed = 12345;
    int naive_stuck = 0;
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + (int)(rnd(&seed) % (trial % 4 == 0 ? MAXN : 9));
        int per = n > 20 ? 2 : 1 + (int)(rnd(&seed) % 12);
        make_group(&g, n, &seed, per);
        int table = tables[trial % 4];
        schedule(&g, table);
        ck_assert_msg(runs_through(&g), "trial %d: %d ranks, table %d: the schedule deadlocks", trial, n, table);
        cut_in_program_order(&g, table);
        naive_stuck += !runs_through(&g);
    }
    ck_assert_msg(naive_stuck > 0, "the simulation never caught the program-order cut deadlocking");
}
END_TEST

/* The two ends of a message get equal keys (checked through one rank pair). */
START_TEST(partners_share_keys)
{
    static group_t g;
    static int order[MAXN][MAXC];
    static uint64_t key[MAXN][MAXC], key_of[MAXN][MAXC];
    unsigned seed = 777;
    for (int trial = 0; trial < 50; trial++) {
        int n = 2 + (int)(rnd(&seed) % 40);
        make_group(&g, n, &seed, 3);
        for (int r = 0; r < n; r++) {
            mpccl_p2p_schedule(r, n, g.call[r], g.ncalls[r], 61, order[r], key[r]);
            for (int i = 0; i < g.ncalls[r]; i++) key_of[r][order[r][i]] = key[r][i];
        }
        for (int r = 0; r < n; r++)
            for (int i = 0; i < g.ncalls[r]; i++)
                ck_assert(key_of[r][i] == key_of[g.call[r][i].peer][g.partner[r][i]]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("p2p_schedule");
    TCase *tc = tcase_create("p2p_schedule");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, random_groups_finish);
    tcase_add_test(tc, partners_share_keys);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
