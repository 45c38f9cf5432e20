/* The table of paths a GPU communicator reaches its peers by
 * (lib/gpu/gpu_path.c): for random layouts of ranks on nodes and random P2P
 * matrices (asymmetric ones included), each pair's path is the one the rule
 * below gives -- the rule the GPU communicator followed before the table --
 * and a rank needs the proxy exactly when the communicator spans nodes. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu/gpu_path.h"
#include "kernels/devplan.h"

#define MAXN 24

/* The rule, written out: itself and P2P both ways on one node take P2P, another
 * node the proxy, the rest of the node host memory. */
static uint32_t expected(const mpccl_topo_t *t, const unsigned char *rows, int n, int a, int b)
{
    if (a == b) return MPCCL_LINK_NVLINK;
    if (t->node_of[a] != t->node_of[b]) return MPCCL_LINK_PROXY;
    return rows[(size_t)a * (n + 1) + b] && rows[(size_t)b * (n + 1) + a] ? MPCCL_LINK_NVLINK : MPCCL_LINK_HOST;
}

START_TEST(random_layouts_follow_the_rule)
{
    int node_of[MAXN];
    unsigned char rows[MAXN * (MAXN + 1)];
    srand(7);
    for (int iter = 0; iter < 2000; iter++) {
        int n = 1 + rand() % MAXN, nodes = 1 + rand() % n;
        mpccl_topo_t t = {.rank = 0, .nranks = n, .nnodes = 0, .node_of = node_of};
        /* Nodes numbered in order of first appearance, as topo.c does. */
        int seen[MAXN] = {0}, map[MAXN];
        for (int r = 0; r < n; r++) {
            int raw = rand() % nodes;
            if (!seen[raw]) {
                seen[raw] = 1;
                map[raw] = t.nnodes++;
            }
            node_of[r] = map[raw];
        }
        for (size_t i = 0; i < (size_t)n * (n + 1); i++) rows[i] = (unsigned char)(rand() % 3 != 0);
        for (int a = 0; a < n; a++) {
            for (int b = 0; b < n; b++) {
                mpccl_gpu_pair_t p = {.topo = &t, .p2p = rows, .n = n, .a = a, .b = b};
                const mpccl_gpu_path_t *path = mpccl_gpu_path_pick(&p);
                ck_assert_ptr_nonnull(path);
                ck_assert_msg(path->link == expected(&t, rows, n, a, b), "n %d ranks %d -> %d: path %s", n, a, b,
                              path->name);
            }
            ck_assert_int_eq(mpccl_gpu_path_needs_proxy(&t, a), t.nnodes > 1);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_path");
    TCase *tc = tcase_create("table");
    /* Check's default 4 s is no bound on a loaded 2-core machine: this
     * checks results, not time. */
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, random_layouts_follow_the_rule);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
