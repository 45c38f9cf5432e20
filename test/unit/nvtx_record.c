/* A minimal NVTX tool for the tests (loaded through NVTX_INJECTION64_PATH): it
 * records domain creation and range pushes and pops in the file named by
 * MPCCL_TEST_NVTX_LOG, the first 1000 events; later ones are only counted.
 * test/unit/nvtx-ranges.sh reads the file. */
#define NVTX_NO_IMPL
#include <stdio.h>
#include <stdlib.h>

#include <nvtx3/nvToolsExt.h>

static FILE *log_file;
static long events;

static void record(const char *what, const char *text)
{
    if (log_file && events++ < 1000) {
        fprintf(log_file, "%s %s\n", what, text ? text : "");
        fflush(log_file);
    }
}

static nvtxDomainHandle_t NVTX_API domain_create(const char *name)
{
    record("domain", name);
    return (nvtxDomainHandle_t)(void *)&log_file; /* any non-NULL handle */
}

static int NVTX_API range_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr)
{
    (void)domain;
    record("push", attr && attr->messageType == NVTX_MESSAGE_TYPE_ASCII ? attr->message.ascii : "?");
    return 0;
}

static int NVTX_API range_pop(nvtxDomainHandle_t domain)
{
    (void)domain;
    record("pop", NULL);
    return 0;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table)
{
    const NvtxExportTableCallbacks *callbacks = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table;
    unsigned int size;
    if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
    if (size <= NVTX_CBID_CORE2_DomainCreateA) return 0;
    const char *path = getenv("MPCCL_TEST_NVTX_LOG");
    if (path) log_file = fopen(path, "w");
    *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)range_push;
    *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)range_pop;
    return 1;
}
