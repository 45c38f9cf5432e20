/* Reading ncclDevCommRequirements_t by version (lib/devapi/devapi_reqs.c):
 * mpccl's own initializer; NCCL 2.29's shorter struct; the 120-byte struct of
 * NCCL 2.32's headers (what nccl4py's generated bindings pass), whose
 * default ginTrafficClass (INT_MIN) sits where mpccl's header keeps
 * worldGinBarrierCount and once read as a GIN request; and what is refused. */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "devapi/devapi_reqs.h"

/* The NCCL 2.32 layout, written out from its field list. */
struct reqs_2_32 {
    size_t size;
    unsigned int magic, version;
    void *resourceRequirementsList, *teamRequirementsList;
    bool lsaMultimem;
    int barrierCount, lsaBarrierCount, railGinBarrierCount, lsaLLA2ABlockCount, lsaLLA2ASlotCount;
    bool ginForceEnable;
    int ginContextCount, ginSignalCount, ginCounterCount, ginConnectionType;
    bool ginExclusiveContexts;
    int ginQueueDepth, ginTrafficClass, worldGinBarrierCount;
    bool ginStrongSignalsRequired, ginVaSignalsRequired;
    int ginCustomStride, ginType;
    bool useRuntimeVersion;
    int cftCaps, cftBarrierCount;
};
_Static_assert(sizeof(struct reqs_2_32) == 120, "NCCL 2.32's struct is 120 bytes");

/* NCCL 2.32's NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER, as nccl4py fills it. */
static struct reqs_2_32 defaults_2_32(void)
{
    struct reqs_2_32 r;
    memset(&r, 0, sizeof(r));
    r.size = sizeof(r);
    r.magic = NCCL_API_MAGIC;
    r.version = NCCL_VERSION(2, 32, 3);
    r.ginContextCount = 4;
    r.ginTrafficClass = INT_MIN; /* NCCL_CONFIG_UNDEF_INT */
    r.ginStrongSignalsRequired = r.ginVaSignalsRequired = true;
    r.ginCustomStride = 1;
    return r;
}

static int read_any(const void *p, struct mpccl_devcomm_reqs *out)
{
    return mpccl_devcomm_reqs_read((const ncclDevCommRequirements_t *)p, out);
}

START_TEST(own_initializer)
{
    ncclDevCommRequirements_t r = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    r.lsaBarrierCount = 7;
    r.worldGinBarrierCount = 3;
    struct mpccl_devcomm_reqs o;
    ck_assert_int_eq(mpccl_devcomm_reqs_read(&r, &o), 0);
    ck_assert(!o.newer_layout);
    ck_assert_int_eq(o.lsaBarrierCount, 7);
    ck_assert_int_eq(o.worldGinBarrierCount, 3);
    ck_assert_int_eq(o.ginType, 0);
}
END_TEST

START_TEST(nccl_2_32_defaults_ask_for_nothing)
{
    struct reqs_2_32 r = defaults_2_32();
    struct mpccl_devcomm_reqs o;
    ck_assert_int_eq(read_any(&r, &o), 0);
    ck_assert(o.newer_layout);
    ck_assert_int_eq(o.size, 120);
    ck_assert_int_eq(o.worldGinBarrierCount, 0); /* not the traffic class's INT_MIN */
    ck_assert_int_eq(o.barrierCount + o.railGinBarrierCount + o.ginSignalCount + o.ginCounterCount, 0);
    ck_assert_int_eq(o.ginConnectionType, 0);
    ck_assert_int_eq(o.ginType + o.cftCaps + o.cftBarrierCount + o.lsaLLA2ABlockCount, 0);
    ck_assert(!o.lsaMultimem && !o.ginForceEnable);
    ck_assert_ptr_null(o.resourceRequirementsList);
    ck_assert_ptr_null(o.teamRequirementsList);
}
END_TEST

START_TEST(nccl_2_32_fields_land_right)
{
    struct reqs_2_32 r = defaults_2_32();
    r.lsaBarrierCount = 16;
    r.worldGinBarrierCount = 2;
    r.ginType = 3;
    r.cftCaps = 1;
    r.cftBarrierCount = 5;
    struct mpccl_devcomm_reqs o;
    ck_assert_int_eq(read_any(&r, &o), 0);
    ck_assert_int_eq(o.lsaBarrierCount, 16);
    ck_assert_int_eq(o.worldGinBarrierCount, 2);
    ck_assert_int_eq(o.ginType, 3);
    ck_assert_int_eq(o.cftCaps, 1);
    ck_assert_int_eq(o.cftBarrierCount, 5);
}
END_TEST

/* NCCL 2.30's 96-byte struct: the 2.31/2.32 fields are read as defaults even
 * when the bytes after it hold something. */
START_TEST(nccl_2_30_shorter_struct)
{
    struct reqs_2_32 r = defaults_2_32();
    r.size = 96;
    r.version = NCCL_VERSION(2, 30, 7);
    r.ginType = 3;
    r.cftCaps = 9;
    r.lsaBarrierCount = 4;
    struct mpccl_devcomm_reqs o;
    ck_assert_int_eq(read_any(&r, &o), 0);
    ck_assert_int_eq(o.lsaBarrierCount, 4);
    ck_assert_int_eq(o.ginType, 0);
    ck_assert_int_eq(o.cftCaps, 0);
}
END_TEST

/* A later NCCL with fields appended: its known prefix is read. */
START_TEST(newer_larger_struct)
{
    struct {
        struct reqs_2_32 known;
        int later[8];
    } r;
    memset(&r, 0x7f, sizeof(r));
    r.known = defaults_2_32();
    r.known.size = sizeof(r);
    r.known.version = NCCL_VERSION(2, 40, 1);
    r.known.lsaBarrierCount = 2;
    struct mpccl_devcomm_reqs o;
    ck_assert_int_eq(read_any(&r, &o), 0);
    ck_assert(o.newer_layout);
    ck_assert_int_eq(o.lsaBarrierCount, 2);
    ck_assert_int_eq(o.cftBarrierCount, 0);
}
END_TEST

/* NCCL 2.29's own header ends at ginQueueDepth (84 bytes used, 88 with
 * padding): the padding is read as mpccl's worldGinBarrierCount only when
 * the size covers it. */
START_TEST(nccl_2_29_short_struct)
{
    ncclDevCommRequirements_t r = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    r.version = NCCL_VERSION(2, 29, 2);
    r.size = offsetof(ncclDevCommRequirements_t, worldGinBarrierCount);
    r.worldGinBarrierCount = 12345;
    r.lsaBarrierCount = 1;
    struct mpccl_devcomm_reqs o;
    ck_assert_int_eq(mpccl_devcomm_reqs_read(&r, &o), 0);
    ck_assert_int_eq(o.worldGinBarrierCount, 0);
    ck_assert_int_eq(o.lsaBarrierCount, 1);
}
END_TEST

START_TEST(refused)
{
    ncclDevCommRequirements_t r = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
    struct mpccl_devcomm_reqs o;
    r.magic = 0;
    ck_assert_int_eq(mpccl_devcomm_reqs_read(&r, &o), -1);
    r.magic = NCCL_API_MAGIC;
    r.size = offsetof(ncclDevCommRequirements_t, lsaBarrierCount);
    ck_assert_int_eq(mpccl_devcomm_reqs_read(&r, &o), -1);
    r.size = 0;
    ck_assert_int_eq(mpccl_devcomm_reqs_read(&r, &o), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("devapi_reqs");
    TCase *tc = tcase_create("read");
    tcase_add_test(tc, own_initializer);
    tcase_add_test(tc, nccl_2_32_defaults_ask_for_nothing);
    tcase_add_test(tc, nccl_2_32_fields_land_right);
    tcase_add_test(tc, nccl_2_30_shorter_struct);
    tcase_add_test(tc, newer_larger_struct);
    tcase_add_test(tc, nccl_2_29_short_struct);
    tcase_add_test(tc, refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
