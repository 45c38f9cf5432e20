/* The LSA team rule (see gpu_lsa_team.h). */
#include "gpu/gpu_lsa_team.h"

void mpccl_lsa_candidate(int n, int me, const unsigned char *reach, int32_t *lo, int32_t *hi)
{
    int a = me, b = me;
    while (a > 0 && reach[a - 1]) a--;
    while (b < n - 1 && reach[b + 1]) b++;
    *lo = a;
    *hi = b;
}

void mpccl_lsa_pick(int n, int me, const int32_t *runs, int *first, int *size)
{
    int32_t lo = runs[2 * me], hi = runs[2 * me + 1];
    int agreed = lo >= 0 && hi < n && lo <= me && me <= hi;
    for (int m = lo; m <= hi && agreed; m++) agreed = runs[2 * m] == lo && runs[2 * m + 1] == hi;
    *first = agreed ? lo : me;
    *size = agreed ? hi - lo + 1 : 1;
}
