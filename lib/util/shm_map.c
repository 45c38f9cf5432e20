/* Named shared-memory segments (shm_map.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/shm_map.h"

mpccl_status_t mpccl_shm_map(const char *name, size_t bytes, int create, const char *what, void **out)
{
    *out = NULL;
    int fd = shm_open(name, O_RDWR | (create ? O_CREAT | O_EXCL : 0), 0600);
    if (fd < 0) return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: shm_open(%s): %s", what, name, strerror(errno));
    if (create && ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: ftruncate(%s, %zu): %s (is /dev/shm large enough?)", what, name,
                          bytes, strerror(e));
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        if (create) shm_unlink(name);
        return mpccl_fail(MPCCL_ERR_SYSTEM, "%s: mmap(%s, %zu): %s", what, name, bytes, strerror(e));
    }
    *out = p;
    return MPCCL_OK;
}
