/* Unit tests of the core pieces that need no peers: settings, error recording,
 * topology from host ids. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"
#include "util/status.h"
#include "core/topo.h"

START_TEST(test_config_int_suffixes)
{
    /* Settings are read once per process, so set them before the first read. */
    ck_assert_int_eq(mpccl_config_int("CHUNK_BYTES"), 3 << 20);
    ck_assert_int_eq(mpccl_config_int("BOOTSTRAP_TIMEOUT"), 7);
    /* NCCL alias honoured */
    ck_assert_str_eq(mpccl_config_str("SOCKET_IFNAME"), "lo");
    /* MPCCL_ wins over the NCCL alias */
    ck_assert_str_eq(mpccl_config_str("ALGO"), "ring");
    /* Malformed -> default (with a warning) */
    ck_assert_int_eq(mpccl_config_int("UCX_CLOSE_TIMEOUT"), 2000);
    /* Unset with empty default -> NULL */
    ck_assert_ptr_null(mpccl_config_str("COMM_ID"));
}
END_TEST

START_TEST(test_error_recording)
{
    mpccl_clear_last_error();
    mpccl_status_t st = mpccl_fail(MPCCL_ERR_ARG, "argument root = %d, expected [0, %d)", 9, 4);
    ck_assert_int_eq(st, MPCCL_ERR_ARG);
    ck_assert_str_eq(mpccl_last_error(), "argument root = 9, expected [0, 4)");
    ck_assert_str_eq(mpccl_status_name(MPCCL_ERR_REMOTE), "remote error");
}
END_TEST

START_TEST(test_topo_nodes)
{
    /* ranks 0,2,4 on host A; 1,3 on host B; 5 on host C */
    const uint64_t h[6] = {11, 22, 11, 22, 11, 33};
    mpccl_topo_t t;
    ck_assert_int_eq(mpccl_topo_from_hashes(h, 6, 3, &t), MPCCL_OK);
    ck_assert_int_eq(t.nnodes, 3);
    const int node[6] = {0, 1, 0, 1, 0, 2}, local[6] = {0, 0, 1, 1, 2, 0};
    for (int r = 0; r < 6; r++) {
        ck_assert_int_eq(t.node_of[r], node[r]);
        ck_assert_int_eq(t.local_rank[r], local[r]);
    }
    ck_assert_int_eq(t.node_size[0], 3);
    ck_assert_int_eq(t.node_size[1], 2);
    ck_assert_int_eq(t.node_size[2], 1);
    mpccl_topo_free(&t);
}
END_TEST

START_TEST(test_host_hash_override)
{
    /* MPCCL_HOSTID was set before the settings were read. */
    uint64_t a = mpccl_topo_host_hash();
    ck_assert_uint_ne(a, 0);
    ck_assert_uint_eq(a, mpccl_topo_host_hash());
}
END_TEST

int main(void)
{
    setenv("MPCCL_CHUNK_BYTES", "3M", 1);
    setenv("MPCCL_BOOTSTRAP_TIMEOUT", "7", 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    setenv("NCCL_ALGO", "tree", 1);
    setenv("MPCCL_ALGO", "ring", 1);
    setenv("MPCCL_UCX_CLOSE_TIMEOUT", "12x", 1);
    setenv("MPCCL_HOSTID", "simulated-node-1", 1);
    unsetenv("MPCCL_COMM_ID");
    unsetenv("NCCL_COMM_ID");
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_config_int_suffixes);
    tcase_add_test(tc, test_error_recording);
    tcase_add_test(tc, test_topo_nodes);
    tcase_add_test(tc, test_host_hash_override);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
