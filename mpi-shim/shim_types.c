/* MPI datatypes and ops -> mpccl's.  Only predefined handles map: derived
 * types and user ops are MPI's business.  Data-movement collectives need no
 * element type, only contiguous bytes. */
#include "shim.h"

/* C integer types whose width depends on the platform map by size. */
#define INT_BY_SIZE(sz, sign) \
    ((sz) == 1 ? ((sign) ? ncclInt8 : ncclUint8) : (sz) == 4 ? ((sign) ? ncclInt32 : ncclUint32) \
     : (sz) == 8 ? ((sign) ? ncclInt64 : ncclUint64) : -1)

/* Fortran's predefined types are separate handles; INTEGER and REAL follow the
 * compiler's default kinds, so they map by their MPI size. */
static int fortran_type(MPI_Datatype dt)
{
    int sz = 0;
    if (dt == MPI_INTEGER || dt == MPI_INTEGER1 || dt == MPI_INTEGER4 || dt == MPI_INTEGER8) {
        PMPI_Type_size(dt, &sz);
        return INT_BY_SIZE(sz, 1);
    }
    if (dt == MPI_REAL || dt == MPI_DOUBLE_PRECISION || dt == MPI_REAL4 || dt == MPI_REAL8) {
        PMPI_Type_size(dt, &sz);
        return sz == 4 ? ncclFloat32 : sz == 8 ? ncclFloat64 : -1;
    }
    return -1;
}

int mpccl_shim_reduce_type(MPI_Datatype dt, ncclDataType_t *out)
{
    int t = -1;
    if (dt == MPI_FLOAT) t = ncclFloat32;
    else if (dt == MPI_DOUBLE) t = ncclFloat64;
    else if (dt == MPI_INT) t = INT_BY_SIZE(sizeof(int), 1);
    else if (dt == MPI_UNSIGNED) t = INT_BY_SIZE(sizeof(unsigned), 0);
    else if (dt == MPI_LONG) t = INT_BY_SIZE(sizeof(long), 1);
    else if (dt == MPI_UNSIGNED_LONG) t = INT_BY_SIZE(sizeof(unsigned long), 0);
    else if (dt == MPI_LONG_LONG || dt == MPI_LONG_LONG_INT) t = INT_BY_SIZE(sizeof(long long), 1);
    else if (dt == MPI_UNSIGNED_LONG_LONG) t = INT_BY_SIZE(sizeof(unsigned long long), 0);
    else if (dt == MPI_INT8_T || dt == MPI_SIGNED_CHAR) t = ncclInt8;
    else if (dt == MPI_UINT8_T || dt == MPI_UNSIGNED_CHAR || dt == MPI_BYTE) t = ncclUint8;
    else if (dt == MPI_CHAR) t = ((char)-1 < 0) ? ncclInt8 : ncclUint8;
    else if (dt == MPI_INT32_T) t = ncclInt32;
    else if (dt == MPI_UINT32_T) t = ncclUint32;
    else if (dt == MPI_INT64_T) t = ncclInt64;
    else if (dt == MPI_UINT64_T) t = ncclUint64;
#ifdef MPIX_C_FLOAT16
    else if (dt == MPIX_C_FLOAT16) t = ncclFloat16;
#endif
#ifdef MPIX_BFLOAT16
    else if (dt == MPIX_BFLOAT16) t = ncclBfloat16;
#endif
    else t = fortran_type(dt);
    if (t < 0) return 0;
    *out = (ncclDataType_t)t;
    return 1;
}

int mpccl_shim_reduce_op(MPI_Op op, ncclRedOp_t *out)
{
    if (op == MPI_SUM) *out = ncclSum;
    else if (op == MPI_PROD) *out = ncclProd;
    else if (op == MPI_MAX) *out = ncclMax;
    else if (op == MPI_MIN) *out = ncclMin;
    else return 0;
    return 1;
}

int mpccl_shim_contiguous(MPI_Datatype dt, size_t *size)
{
    int sz;
    MPI_Aint lb, extent, tlb, textent;
    if (dt == MPI_DATATYPE_NULL || PMPI_Type_size(dt, &sz) != MPI_SUCCESS ||
        PMPI_Type_get_extent(dt, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(dt, &tlb, &textent) != MPI_SUCCESS)
        return 0;
    *size = (size_t)sz;
    return sz > 0 && lb == 0 && tlb == 0 && extent == sz && textent == sz;
}

int mpccl_shim_span(MPI_Datatype dt, size_t count, ptrdiff_t *lb, size_t *bytes)
{
    MPI_Aint l, extent, tlb, textent;
    if (dt == MPI_DATATYPE_NULL || PMPI_Type_get_extent(dt, &l, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(dt, &tlb, &textent) != MPI_SUCCESS || extent < 0)
        return 0;
    *lb = (ptrdiff_t)tlb;
    *bytes = count ? (size_t)(count - 1) * (size_t)extent + (size_t)textent : 0;
    return 1;
}
