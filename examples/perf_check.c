/* Test data and host reference: see perf_check.h.
 *
 * How the data keeps the check exact.  Inputs are chosen per reduction so that
 * sum, prod, max and min are exact in every datatype whatever order and grouping
 * the library uses:
 *   - integers: ranges small enough that no partial result overflows, so the
 *     reference computed in double (all values < 2^53) is exact;
 *   - sum on floats: multiples of 1/8 with |x| <= K/8, K = 2^p / nranks (p = bits
 *     of precision).  Every partial sum is a multiple of 1/8 of magnitude at most
 *     2^p / 8, hence representable: no rounding ever happens;
 *   - prod on floats: +-1/2, +-1, +-2 (and some zeros), the non-unit factors only on
 *     the first L ranks with 2^L within the format's range: partial products are
 *     powers of two, representable;
 *   - max/min never round.
 * ncclAvg and PreMulSum on floats do round (1/nranks and x * scalar are not
 * representable in general); perf_tolerance bounds that error. */
#include "perf_check.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Binary floating-point format: exponent and explicit mantissa bits; fn marks
 * e4m3's "finite" encoding (no infinities, only S.1111.111 is NaN). */
typedef struct fmt {
    int ebits, mbits, fn;
} fmt_t;

static const fmt_t FMT_HALF = {5, 10, 0}, FMT_BF16 = {8, 7, 0}, FMT_E4M3 = {4, 3, 1}, FMT_E5M2 = {5, 2, 0};

static const struct {
    const char *name;
    size_t size;
    int is_float, is_signed;
} types[ncclNumTypes] = {
    [ncclInt8] = {"int8", 1, 0, 1},         [ncclUint8] = {"uint8", 1, 0, 0},
    [ncclInt32] = {"int32", 4, 0, 1},       [ncclUint32] = {"uint32", 4, 0, 0},
    [ncclInt64] = {"int64", 8, 0, 1},       [ncclUint64] = {"uint64", 8, 0, 0},
    [ncclFloat16] = {"half", 2, 1, 1},      [ncclFloat32] = {"float", 4, 1, 1},
    [ncclFloat64] = {"double", 8, 1, 1},    [ncclBfloat16] = {"bfloat16", 2, 1, 1},
    [ncclFloat8e4m3] = {"f8e4m3", 1, 1, 1}, [ncclFloat8e5m2] = {"f8e5m2", 1, 1, 1},
};

static const char *const op_names[PERF_NUM_OPS] = {"sum", "prod", "max", "min", "avg", "mulsum", "none"};

static int type_ok(ncclDataType_t t) { return (int)t >= 0 && (int)t < ncclNumTypes; }

size_t perf_type_size(ncclDataType_t t) { return type_ok(t) ? types[t].size : 0; }
const char *perf_type_name(ncclDataType_t t) { return type_ok(t) ? types[t].name : "invalid"; }
int perf_type_is_float(ncclDataType_t t) { return type_ok(t) && types[t].is_float; }

int perf_type_parse(const char *s, ncclDataType_t *t)
{
    static const struct { const char *alias; ncclDataType_t t; } aliases[] = {
        {"char", ncclInt8}, {"int", ncclInt32}, {"float16", ncclFloat16}, {"fp16", ncclFloat16},
        {"float32", ncclFloat32}, {"float64", ncclFloat64}, {"bf16", ncclBfloat16},
        {"e4m3", ncclFloat8e4m3}, {"e5m2", ncclFloat8e5m2}};
    for (int i = 0; i < ncclNumTypes; i++)
        if (!strcmp(s, types[i].name)) return *t = (ncclDataType_t)i, 0;
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (!strcmp(s, aliases[i].alias)) return *t = aliases[i].t, 0;
    return -1;
}

const char *perf_op_name(perf_op_t op) { return (int)op >= 0 && op < PERF_NUM_OPS ? op_names[op] : "invalid"; }

int perf_op_parse(const char *s, perf_op_t *op)
{
    for (int i = 0; i < PERF_NUM_OPS; i++)
        if (!strcmp(s, op_names[i])) return *op = (perf_op_t)i, 0;
    if (!strcmp(s, "premulsum")) return *op = PERF_PREMULSUM, 0;
    return -1;
}

ncclRedOp_t perf_op_nccl(perf_op_t op)
{
    switch (op) {
    case PERF_PROD: return ncclProd;
    case PERF_MAX: return ncclMax;
    case PERF_MIN: return ncclMin;
    case PERF_AVG: return ncclAvg;
    default: return ncclSum;
    }
}

/* ---- small float formats ---------------------------------------------------- */

static int fmt_bias(const fmt_t *f) { return (1 << (f->ebits - 1)) - 1; }

static double fmt_decode(const fmt_t *f, uint32_t bits)
{
    uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
    uint32_t e = (bits >> f->mbits) & emask, m = bits & mmask;
    int sign = (bits >> (f->ebits + f->mbits)) & 1;
    double v;
    if (e == 0)
        v = ldexp((double)m, 1 - fmt_bias(f) - f->mbits);
    else if (e == emask && !f->fn)
        v = m ? NAN : INFINITY;
    else if (e == emask && f->fn && m == mmask)
        v = NAN;
    else
        v = ldexp((double)(m | (1u << f->mbits)), (int)e - fmt_bias(f) - f->mbits);
    return sign ? -v : v;
}

static uint32_t fmt_max_bits(const fmt_t *f)
{
    uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
    /* e4m3: top exponent is finite except its all-ones mantissa */
    return f->fn ? (emask << f->mbits) | (mmask - 1) : ((emask - 1) << f->mbits) | mmask;
}

/* Round to nearest even; overflow saturates for fp8 (like the library's conversion)
 * and gives infinity for half and bf16 (IEEE). */
static uint32_t fmt_encode(const fmt_t *f, double v)
{
    uint32_t sign = signbit(v) ? 1u << (f->ebits + f->mbits) : 0;
    uint32_t emask = (1u << f->ebits) - 1, one = 1u << f->mbits;
    int emin = 1 - fmt_bias(f), e;
    double a = fabs(v), q;
    if (isnan(v)) return f->fn ? sign | (emask << f->mbits) | (one - 1) : (emask << f->mbits) | (one >> 1);
    if (a == 0) return sign;
    frexp(a, &e);
    e -= 1; /* a = 1.x * 2^e */
    if (e < emin) e = emin;
    q = rint(ldexp(a, f->mbits - e)); /* significand in ulps of 2^e */
    if (q >= 2.0 * one) q /= 2, e += 1;
    int subnormal = q < one;
    int64_t efield = subnormal ? 0 : e + fmt_bias(f);
    int fp8 = f->ebits + f->mbits == 7;
    uint32_t bits = (uint32_t)(efield << f->mbits) | ((uint32_t)q & (one - 1));
    if (efield >= (int64_t)emask + (f->fn ? 1 : 0) || (f->fn && efield == emask && (bits & (one - 1)) == one - 1) ||
        isinf(v))
        return sign | (fp8 ? fmt_max_bits(f) : emask << f->mbits);
    return sign | bits;
}

static const fmt_t *small_fmt(ncclDataType_t t)
{
    switch (t) {
    case ncclFloat16: return &FMT_HALF;
    case ncclBfloat16: return &FMT_BF16;
    case ncclFloat8e4m3: return &FMT_E4M3;
    case ncclFloat8e5m2: return &FMT_E5M2;
    default: return NULL;
    }
}

/* Bits of precision, smallest subnormal and largest finite value of a float type. */
static void float_params(ncclDataType_t t, int *p, double *tiny, double *maxv)
{
    const fmt_t *f = small_fmt(t);
    if (f) {
        *p = f->mbits + 1;
        *tiny = ldexp(1, 1 - fmt_bias(f) - f->mbits);
        *maxv = fmt_decode(f, fmt_max_bits(f));
    } else if (t == ncclFloat32) {
        *p = FLT_MANT_DIG, *tiny = FLT_TRUE_MIN, *maxv = FLT_MAX;
    } else {
        *p = DBL_MANT_DIG, *tiny = DBL_TRUE_MIN, *maxv = DBL_MAX;
    }
}

/* ---- element access ------------------------------------------------------- */

double perf_get(ncclDataType_t t, const void *buf, size_t i)
{
    const unsigned char *b = (const unsigned char *)buf + i * perf_type_size(t);
    union { int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
            uint16_t u16; float f; double d; } x;
    memcpy(&x, b, perf_type_size(t));
    switch (t) {
    case ncclInt8: return x.i8;
    case ncclUint8: return x.u8;
    case ncclInt32: return x.i32;
    case ncclUint32: return x.u32;
    case ncclInt64: return (double)x.i64;
    case ncclUint64: return (double)x.u64;
    case ncclFloat32: return x.f;
    case ncclFloat64: return x.d;
    case ncclFloat16: case ncclBfloat16: return fmt_decode(small_fmt(t), x.u16);
    case ncclFloat8e4m3: case ncclFloat8e5m2: return fmt_decode(small_fmt(t), x.u8);
    default: return NAN;
    }
}

void perf_set(ncclDataType_t t, void *buf, size_t i, double v)
{
    unsigned char *b = (unsigned char *)buf + i * perf_type_size(t);
    union { int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
            uint16_t u16; float f; double d; } x;
    switch (t) {
    case ncclInt8: x.i8 = (int8_t)v; break;
    case ncclUint8: x.u8 = (uint8_t)v; break;
    case ncclInt32: x.i32 = (int32_t)v; break;
    case ncclUint32: x.u32 = (uint32_t)v; break;
    case ncclInt64: x.i64 = (int64_t)v; break;
    case ncclUint64: x.u64 = (uint64_t)v; break;
    case ncclFloat32: x.f = (float)v; break;
    case ncclFloat64: x.d = v; break;
    case ncclFloat16: case ncclBfloat16: x.u16 = (uint16_t)fmt_encode(small_fmt(t), v); break;
    case ncclFloat8e4m3: case ncclFloat8e5m2: x.u8 = (uint8_t)fmt_encode(small_fmt(t), v); break;
    default: return;
    }
    memcpy(b, &x, perf_type_size(t));
}

/* ---- data generation ------------------------------------------------------ */

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rank_base(const perf_data_t *d, int rank) { return mix64(d->seed ^ mix64((uint64_t)rank + 1)); }

/* Largest |x| for sums: the scalar of PreMulSum (at most 3) is included so the
 * premultiplied sum does not overflow either. */
static double int_range(ncclDataType_t t, int nranks)
{
    double maxv = ldexp(1, (int)(8 * types[t].size) - (types[t].is_signed ? 1 : 0)) - 1;
    double r = floor(maxv / (3.0 * nranks));
    if (r > ldexp(1, 40)) r = ldexp(1, 40); /* keep sums far below 2^53 */
    return r < 1 ? 1 : r;
}

/* Ranks below this may contribute a factor 2 (or 1/2) to a product. */
static int prod_ranks(ncclDataType_t t)
{
    if (!types[t].is_float) return (int)(8 * types[t].size) - (types[t].is_signed ? 2 : 1);
    int p, l1, l2;
    double tiny, maxv;
    float_params(t, &p, &tiny, &maxv);
    l1 = (int)floor(log2(maxv));
    l2 = (int)-log2(tiny);
    return l1 < l2 ? (l1 < 60 ? l1 : 60) : (l2 < 60 ? l2 : 60);
}

static double gen_value(const perf_data_t *d, int rank, uint64_t h)
{
    ncclDataType_t t = d->type;
    int neg = (h >> 63) && types[t].is_signed;
    uint64_t r = h & 0x7fffffffffffffffull;
    double v;
    if (d->op == PERF_PROD) {
        if (r % 64 == 0) return 0;
        int kind = (int)((r >> 8) % 3); /* 0: 1, 1: 2, 2: 1/2 */
        if (rank >= prod_ranks(t) || (kind == 2 && !types[t].is_float)) kind = 0;
        v = kind == 0 ? 1 : kind == 1 ? 2 : 0.5;
        return neg ? -v : v;
    }
    if (!types[t].is_float) {
        if (d->op == PERF_MAX || d->op == PERF_MIN) {
            /* full range (signedness errors show), 64-bit values exact in double */
            uint64_t bits = types[t].size == 8 ? (h >> 11) << 11 : h;
            unsigned char tmp[8];
            memcpy(tmp, &bits, 8); /* little-endian: low bytes first */
            return perf_get(t, tmp, 0);
        }
        double range = int_range(t, d->nranks);
        v = (double)(r % ((uint64_t)range + 1));
        return neg ? -v : v;
    }
    int p;
    double tiny, maxv, k;
    float_params(t, &p, &tiny, &maxv);
    if (p > 30) p = 30;
    k = ldexp(1, p);
    if (d->op != PERF_MAX && d->op != PERF_MIN) k = floor(k / d->nranks);
    if (k < 1) k = 1;
    v = (double)(r % ((uint64_t)k + 1)) / 8;
    return neg ? -v : v;
}

void perf_data_init(perf_data_t *d, ncclDataType_t t, perf_op_t op, int nranks, uint64_t seed)
{
    static const double fscal[] = {0.5, 0.75, 1.25, 1.5, 2, 3, -1.5};
    static const double iscal[] = {2, 3, -2};
    uint64_t h = mix64(seed ^ 0x5ca1a7);
    d->type = t;
    d->op = op;
    d->nranks = nranks;
    d->seed = seed;
    if (type_ok(t) && types[t].is_float)
        d->scalar = fscal[h % 7];
    else
        d->scalar = iscal[h % (type_ok(t) && types[t].is_signed ? 3 : 2)];
}

void perf_fill(const perf_data_t *d, int rank, size_t first, size_t count, void *buf)
{
    uint64_t base = rank_base(d, rank);
    size_t sz = perf_type_size(d->type);
    for (size_t i = 0; i < count; i++) {
        uint64_t h = mix64(base + (first + i) * 0xd1b54a32d192ed03ull);
        if (d->op == PERF_COPY)
            memcpy((char *)buf + i * sz, &h, sz);
        else
            perf_set(d->type, buf, i, gen_value(d, rank, h));
    }
}

/* For timing only: the first PERF_FILL_PERIOD elements as perf_fill makes
 * them, repeated.  The values are of the same kind (the reductions see the
 * same magnitudes and signs), and a 1 GB bf16 input takes a memcpy instead
 * of half a billion conversions (minutes per size with four fills). */
#define PERF_FILL_PERIOD ((size_t)1 << 16)
void perf_fill_timing(const perf_data_t *d, int rank, size_t count, void *buf)
{
    size_t sz = perf_type_size(d->type), done = count < PERF_FILL_PERIOD ? count : PERF_FILL_PERIOD;
    perf_fill(d, rank, 0, done, buf);
    while (done < count) {
        size_t n = done < count - done ? done : count - done;
        memcpy((char *)buf + done * sz, buf, n * sz);
        done += n;
    }
}

/* ---- reference and tolerance ---------------------------------------------- */

/* Tolerance for avg and PreMulSum on floats, first-order rounding analysis.  With
 * u = 2^-p (half an ulp, relative) every rounding of a value v errs by at most
 * u*|v| (normal) or tiny/2 (subnormal).  PreMulSum: n products x_i*s and n-1
 * additions, each rounded, every intermediate bounded by M = |s|*sum|x_i| grown by
 * the earlier roundings, (1+u)^steps: |err| <= steps * (u*M + tiny/2), steps = n.
 * avg: rounding 1/n to the datatype adds one relative error u (or sum-then-divide
 * rounds once at the end): steps = n + 1 on M = sum|x_i| / n.  Integers, and the
 * other operations on the data above, are exact: tolerance 0. */
double perf_tolerance(const perf_data_t *d, double abs_sum)
{
    int p, steps;
    double tiny, maxv, u, m;
    if (!perf_type_is_float(d->type) || (d->op != PERF_AVG && d->op != PERF_PREMULSUM)) return 0;
    float_params(d->type, &p, &tiny, &maxv);
    u = ldexp(1, -p);
    if (d->op == PERF_AVG) {
        steps = d->nranks + 1;
        m = abs_sum / d->nranks;
    } else {
        steps = d->nranks;
        m = abs_sum * fabs(d->scalar);
    }
    m *= pow(1 + u, steps);
    return steps * (u * m + tiny / 2);
}

static double reduce_ref(const perf_data_t *d, const uint64_t *bases, size_t idx, double *abs_sum)
{
    double acc = 0, a = 0;
    for (int r = 0; r < d->nranks; r++) {
        double x = gen_value(d, r, mix64(bases[r] + idx * 0xd1b54a32d192ed03ull));
        a += fabs(x);
        if (r == 0 && d->op != PERF_SUM && d->op != PERF_AVG && d->op != PERF_PREMULSUM)
            acc = x;
        else if (d->op == PERF_PROD)
            acc *= x;
        else if (d->op == PERF_MAX)
            acc = x > acc ? x : acc;
        else if (d->op == PERF_MIN)
            acc = x < acc ? x : acc;
        else
            acc += d->op == PERF_PREMULSUM ? x * d->scalar : x;
    }
    *abs_sum = a;
    if (d->op == PERF_AVG) {
        if (perf_type_is_float(d->type)) return acc / d->nranks;
        /* NCCL: integer average divides the sum, truncating toward zero */
        return types[d->type].is_signed ? (double)((int64_t)acc / d->nranks)
                                        : (double)((uint64_t)acc / (uint64_t)d->nranks);
    }
    return acc;
}

size_t perf_check_reduce(const perf_data_t *d, size_t first, size_t count, const void *out,
                         char *msg, size_t msglen)
{
    uint64_t bases[d->nranks > 0 ? d->nranks : 1];
    size_t wrong = 0;
    for (int r = 0; r < d->nranks; r++) bases[r] = rank_base(d, r);
    for (size_t i = 0; i < count; i++) {
        double abs_sum, want = reduce_ref(d, bases, first + i, &abs_sum);
        double got = perf_get(d->type, out, i), tol = perf_tolerance(d, abs_sum);
        if (fabs(got - want) <= tol) continue; /* false for NaN */
        if (wrong++ == 0 && msg)
            snprintf(msg, msglen, "%s %s: element %zu is %.17g, expected %.17g (tolerance %.3g)",
                     perf_type_name(d->type), perf_op_name(d->op), i, got, want, tol);
    }
    return wrong;
}

size_t perf_check_copy(const perf_data_t *d, int src, size_t first, size_t count, const void *out,
                       char *msg, size_t msglen)
{
    unsigned char want[4096];
    size_t sz = perf_type_size(d->type), per = sizeof(want) / (sz ? sz : 1), wrong = 0;
    for (size_t done = 0; done < count; done += per) {
        size_t n = count - done < per ? count - done : per;
        const unsigned char *o = (const unsigned char *)out + done * sz;
        perf_fill(d, src, first + done, n, want);
        if (!memcmp(want, o, n * sz)) continue;
        for (size_t i = 0; i < n; i++) {
            if (!memcmp(want + i * sz, o + i * sz, sz)) continue;
            if (wrong++ == 0 && msg) {
                uint64_t g = 0, w = 0;
                memcpy(&g, o + i * sz, sz);
                memcpy(&w, want + i * sz, sz);
                snprintf(msg, msglen, "%s copy from rank %d: element %zu is 0x%llx, expected 0x%llx",
                         perf_type_name(d->type), src, done + i, (unsigned long long)g,
                         (unsigned long long)w);
            }
        }
    }
    return wrong;
}
