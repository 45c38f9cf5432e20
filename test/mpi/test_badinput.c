/* Argument checking: every bad argument gives its ncclResult_t, ncclGetLastError
 * names the argument and its value, and the communicator still works afterwards.
 * All ranks make the same bad call, so no rank is left waiting in a collective. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static void *sbuf, *rbuf; /* 64 elements of any type */

static int contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; hay && *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

/* got must be want; the last error must mention name and value (either of two
 * spellings of the value, e.g. decimal or hex; NULL: no value check); then the
 * world communicator must still reduce correctly. */
static void expect_bad(const char *call, ncclResult_t got, ncclResult_t want, ncclComm_t errcomm, const char *name,
                       const char *value, const char *value2)
{
    const char *last = ncclGetLastError(errcomm);
    T_EXPECT(got == want, "%s returned %s, expected %s", call, ncclGetErrorString(got), ncclGetErrorString(want));
    T_EXPECT(last && contains_ci(last, name), "%s: last error \"%s\" does not name '%s'", call, last ? last : "(null)",
             name);
    if (value)
        T_EXPECT(last && (contains_ci(last, value) || (value2 && contains_ci(last, value2))),
                 "%s: last error \"%s\" does not give the value %s", call, last ? last : "(null)", value);
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "communicator broken after %s", call);
}

#define BAD(call, want, comm, name, value, value2) expect_bad(#call, (call), want, comm, name, value, value2)

START_TEST(test_null_comm)
{
    int n;
    cudaStream_t st = t_mem.stream;
    BAD(ncclAllReduce(sbuf, rbuf, 4, ncclFloat, ncclSum, NULL, st), ncclInvalidArgument, NULL, "comm", NULL, NULL);
    BAD(ncclBroadcast(sbuf, rbuf, 4, ncclFloat, 0, NULL, st), ncclInvalidArgument, NULL, "comm", NULL, NULL);
    BAD(ncclSend(sbuf, 4, ncclFloat, 0, NULL, st), ncclInvalidArgument, NULL, "comm", NULL, NULL);
    BAD(ncclCommCount(NULL, &n), ncclInvalidArgument, NULL, "comm", NULL, NULL);
    BAD(ncclCommCount(t_comm, NULL), ncclInvalidArgument, t_comm, "count", NULL, NULL);
    T_END();
}
END_TEST

START_TEST(test_null_buffers)
{
    cudaStream_t st = t_mem.stream;
    int peer = (t_rank + 1) % t_nranks;
    BAD(ncclAllReduce(NULL, rbuf, 4, ncclFloat, ncclSum, t_comm, st), ncclInvalidArgument, t_comm, "sendbuff", NULL, NULL);
    BAD(ncclAllReduce(sbuf, NULL, 4, ncclFloat, ncclSum, t_comm, st), ncclInvalidArgument, t_comm, "recvbuff", NULL, NULL);
    BAD(ncclAllGather(NULL, rbuf, 1, ncclInt32, t_comm, st), ncclInvalidArgument, t_comm, "sendbuff", NULL, NULL);
    BAD(ncclBcast(NULL, 4, ncclInt8, 0, t_comm, st), ncclInvalidArgument, t_comm, "buff", NULL, NULL);
    BAD(ncclSend(NULL, 4, ncclFloat, peer, t_comm, st), ncclInvalidArgument, t_comm, "sendbuff", NULL, NULL);
    BAD(ncclRecv(NULL, 4, ncclFloat, peer, t_comm, st), ncclInvalidArgument, t_comm, "recvbuff", NULL, NULL);
    T_END();
}
END_TEST

START_TEST(test_bad_datatype)
{
    cudaStream_t st = t_mem.stream;
    ncclDataType_t bad = (ncclDataType_t)99;
    BAD(ncclAllReduce(sbuf, rbuf, 4, bad, ncclSum, t_comm, st), ncclInvalidArgument, t_comm, "datatype", "99", NULL);
    BAD(ncclAllGather(sbuf, rbuf, 1, bad, t_comm, st), ncclInvalidArgument, t_comm, "datatype", "99", NULL);
    BAD(ncclBroadcast(sbuf, rbuf, 4, ncclNumTypes, 0, t_comm, st), ncclInvalidArgument, t_comm, "datatype", "12", NULL);
    T_END();
}
END_TEST

START_TEST(test_bad_op)
{
    cudaStream_t st = t_mem.stream;
    ncclRedOp_t op;
    float scalar = 2;
    BAD(ncclAllReduce(sbuf, rbuf, 4, ncclFloat, (ncclRedOp_t)77, t_comm, st), ncclInvalidArgument, t_comm, "op", "77",
        NULL);
    BAD(ncclReduce(sbuf, rbuf, 4, ncclFloat, ncclNumOps, 0, t_comm, st), ncclInvalidArgument, t_comm, "op", "5", NULL);
    /* a PreMulSum op is gone once destroyed */
    T_NCCL(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, t_comm));
    T_NCCL(ncclRedOpDestroy(op, t_comm));
    BAD(ncclAllReduce(sbuf, rbuf, 4, ncclFloat, op, t_comm, st), ncclInvalidArgument, t_comm, "op", NULL, NULL);
    BAD(ncclRedOpDestroy(ncclSum, t_comm), ncclInvalidArgument, t_comm, "op", NULL, NULL);
    T_END();
}
END_TEST

START_TEST(test_bad_root_peer)
{
    cudaStream_t st = t_mem.stream;
    char nr[16];
    int n = t_nranks;
    snprintf(nr, sizeof(nr), "%d", n);
    for (int k = 0; k < 2; k++) {
        int bad = k == 0 ? -1 : n;
        const char *v = k == 0 ? "-1" : nr;
        BAD(ncclBroadcast(sbuf, rbuf, 4, ncclFloat, bad, t_comm, st), ncclInvalidArgument, t_comm, "root", v, NULL);
        BAD(ncclBcast(rbuf, 4, ncclFloat, bad, t_comm, st), ncclInvalidArgument, t_comm, "root", v, NULL);
        BAD(ncclReduce(sbuf, rbuf, 4, ncclFloat, ncclSum, bad, t_comm, st), ncclInvalidArgument, t_comm, "root", v, NULL);
        BAD(ncclGather(sbuf, rbuf, 1, ncclFloat, bad, t_comm, st), ncclInvalidArgument, t_comm, "root", v, NULL);
        BAD(ncclScatter(sbuf, rbuf, 1, ncclFloat, bad, t_comm, st), ncclInvalidArgument, t_comm, "root", v, NULL);
        BAD(ncclSend(sbuf, 4, ncclFloat, bad, t_comm, st), ncclInvalidArgument, t_comm, "peer", v, NULL);
        BAD(ncclRecv(rbuf, 4, ncclFloat, bad, t_comm, st), ncclInvalidArgument, t_comm, "peer", v, NULL);
    }
    T_END();
}
END_TEST

START_TEST(test_count_overflow)
{
    cudaStream_t st = t_mem.stream;
    BAD(ncclAllReduce(sbuf, rbuf, SIZE_MAX, ncclFloat, ncclSum, t_comm, st), ncclInvalidArgument, t_comm, "count",
        "18446744073709551615", "ffffffffffffffff");
    /* count * nranks * 4 bytes overflows for any nranks */
    BAD(ncclAllGather(sbuf, rbuf, SIZE_MAX / 2, ncclInt32, t_comm, st), ncclInvalidArgument, t_comm, "count",
        "9223372036854775807", "7fffffffffffffff");
    BAD(ncclSend(sbuf, SIZE_MAX / 4, ncclDouble, (t_rank + 1) % t_nranks, t_comm, st), ncclInvalidArgument, t_comm,
        "count", NULL, NULL);
    T_END();
}
END_TEST

START_TEST(test_uninitialized_id)
{
    ncclUniqueId zero;
    ncclComm_t c = NULL;
    ncclResult_t r;
    memset(&zero, 0, sizeof(zero));
    r = ncclCommInitRank(&c, t_nranks, zero, t_rank);
    T_EXPECT(r == ncclInvalidArgument, "ncclCommInitRank with an all-zero id returned %s", ncclGetErrorString(r));
    const char *last = ncclGetLastError(NULL);
    T_EXPECT(last && (contains_ci(last, "uniqueid") || contains_ci(last, "commid") || contains_ci(last, "unique id")),
             "last error \"%s\" does not name the unique id", last ? last : "(null)");
    if (c) ncclCommDestroy(c);
    BAD(ncclCommInitRank(&c, 0, zero, 0), ncclInvalidArgument, NULL, "nranks", "0", NULL);
    T_EXPECT(t_comm_works(t_comm, &t_mem) == 0, "world communicator broken");
    T_END();
}
END_TEST

static void setup_buffers(void)
{
    sbuf = perf_mem_alloc(&t_mem, 64 * 8);
    rbuf = perf_mem_alloc(&t_mem, 64 * 8 * (size_t)t_nranks);
}

static void free_buffers(void)
{
    perf_mem_free(&t_mem, sbuf);
    perf_mem_free(&t_mem, rbuf);
}

static Suite *badinput_suite(void)
{
    Suite *s = suite_create("badinput");
    TCase *tc = t_tcase("badinput");
    tcase_add_unchecked_fixture(tc, setup_buffers, free_buffers);
    tcase_add_test(tc, test_null_comm);
    tcase_add_test(tc, test_null_buffers);
    tcase_add_test(tc, test_bad_datatype);
    tcase_add_test(tc, test_bad_op);
    tcase_add_test(tc, test_bad_root_peer);
    tcase_add_test(tc, test_count_overflow);
    tcase_add_test(tc, test_uninitialized_id);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return t_main(argc, argv, badinput_suite); }
