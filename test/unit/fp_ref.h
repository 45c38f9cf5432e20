/* Reference model of fp16 / bf16 / fp8 for the unit tests, written independently
 * of lib/util/fp_convert.h: values are decoded from the sign/exponent/mantissa fields
 * with ldexp, and encoding searches a sorted table of every finite value for the
 * nearest one (ties to the even pattern), then applies the inf/saturation/NaN
 * rules.  Everything is in double, which holds every value and every midpoint of
 * these formats exactly. */
#ifndef MPCCL_TEST_FP_REF_H
#define MPCCL_TEST_FP_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    const char *name;
    int bits, ebits, mbits, bias;
    int ieee;          /* all-ones exponent is inf/NaN; otherwise E4M3FN: only S.1111.111 is NaN */
    int satfinite;     /* conversion clamps to +-max finite instead of producing inf */
    uint32_t nan_out;  /* the pattern any NaN converts to */
    /* filled by ref_init: */
    int n;             /* finite non-negative values */
    double *val;       /* sorted ascending */
    uint32_t *pat;
} ref_fmt;

static ref_fmt REF_F16 = {"fp16", 16, 5, 10, 15, 1, 0, 0x7fff, 0, NULL, NULL};
static ref_fmt REF_BF16 = {"bf16", 16, 8, 7, 127, 1, 0, 0x7fff, 0, NULL, NULL};
static ref_fmt REF_E4M3 = {"e4m3", 8, 4, 3, 7, 0, 1, 0x7f, 0, NULL, NULL};
static ref_fmt REF_E5M2 = {"e5m2", 8, 5, 2, 15, 1, 1, 0x7f, 0, NULL, NULL};

/* Decodes pattern p; NaN patterns return NAN. */
static double ref_decode(const ref_fmt *f, uint32_t p)
{
    uint32_t sign = (p >> (f->bits - 1)) & 1u;
    uint32_t emax_field = (1u << f->ebits) - 1u, mmask = (1u << f->mbits) - 1u;
    uint32_t e = (p >> f->mbits) & emax_field, m = p & mmask;
    double v;
    if (f->ieee && e == emax_field)
        v = m == 0 ? INFINITY : NAN;
    else if (!f->ieee && e == emax_field && m == mmask)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - f->bias - f->mbits);
    else
        v = ldexp((double)(m + (1u << f->mbits)), (int)e - f->bias - f->mbits);
    return sign ? -v : v;
}

static int ref_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void ref_init(ref_fmt *f)
{
    if (f->val) return;
    uint32_t npos = 1u << (f->bits - 1);
    double *pairs = malloc(sizeof(double) * 2 * npos);
    int n = 0;
    for (uint32_t p = 0; p < npos; p++) {
        double v = ref_decode(f, p);
        if (!isfinite(v)) continue;
        pairs[2 * n] = v;
        pairs[2 * n + 1] = (double)p;
        n++;
    }
    qsort(pairs, (size_t)n, 2 * sizeof(double), ref_cmp);
    f->n = n;
    f->val = malloc(sizeof(double) * (size_t)n);
    f->pat = malloc(sizeof(uint32_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        f->val[i] = pairs[2 * i];
        f->pat[i] = (uint32_t)pairs[2 * i + 1];
    }
    free(pairs);
}

static uint32_t ref_inf_pattern(const ref_fmt *f) { return ((1u << f->ebits) - 1u) << f->mbits; }

/* Rounds x once to f, ties to even. */
static uint32_t ref_encode(ref_fmt *f, double x)
{
    ref_init(f);
    if (isnan(x)) return f->nan_out;
    uint32_t sign = signbit(x) ? 1u << (f->bits - 1) : 0u;
    double a = fabs(x), max = f->val[f->n - 1];
    uint32_t maxp = f->pat[f->n - 1];
    if (a > max) {
        if (f->satfinite) return sign | maxp;
        /* IEEE: round as if the exponent were unbounded; the value past max is
         * 2^(emax+1), whose (even) significand wins the tie, and it means inf. */
        double next = 2 * ldexp(1.0, (1 << f->ebits) - 2 - f->bias);
        return sign | (2 * a >= max + next ? ref_inf_pattern(f) : maxp);
    }
    int lo = 0, hi = f->n - 1; /* invariant: val[lo] <= a <= val[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (f->val[mid] <= a) lo = mid; else hi = mid;
    }
    if (f->val[lo] == a) return sign | f->pat[lo];
    if (f->val[hi] == a) return sign | f->pat[hi];
    double mid = (f->val[lo] + f->val[hi]) / 2; /* exact: adjacent values */
    if (a < mid) return sign | f->pat[lo];
    if (a > mid) return sign | f->pat[hi];
    return sign | ((f->pat[lo] & 1u) ? f->pat[hi] : f->pat[lo]);
}

#endif
