/*
 * A stand-in for libibverbs.so.1, for tests/it/verbs.rs: every symbol the exporter resolves, on a
 * machine without RDMA devices, whose ibv_get_device_list can be held at a gate. While the file
 * GATE exists, a call first creates GATE.held (so the test knows a caller is in) and then waits
 * until GATE is removed; then, as without a gate, it fails with ENODEV. A responder session
 * held there keeps its port for as long as the test wants, without timing.
 *
 * Build: gcc -shared -fPIC -DGATE='"/path/to/gate"' -o libibverbs.so.1 gated_libibverbs.c
 * Every other entry point fails with ENOSYS: the exporter never gets far enough to call one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <unistd.h>

#ifndef GATE
#error "build with -DGATE='\"/path/to/gate\"'"
#endif

void **ibv_get_device_list(int *num) {
    if (access(GATE, F_OK) == 0) {
        int held = open(GATE ".held", O_WRONLY | O_CREAT, 0600);
        if (held >= 0)
            close(held);
        while (access(GATE, F_OK) == 0)
            usleep(10000);
    }
    if (num != NULL)
        *num = 0;
    errno = ENODEV;
    return NULL;
}

#define UNUSED_POINTER(name) \
    void *name(void) { errno = ENOSYS; return NULL; }
#define UNUSED_STATUS(name) \
    int name(void) { return ENOSYS; }

void ibv_free_device_list(void **list) { (void)list; }
UNUSED_POINTER(ibv_get_device_name)
UNUSED_POINTER(ibv_open_device)
UNUSED_STATUS(ibv_close_device)
UNUSED_STATUS(ibv_query_port)
UNUSED_STATUS(ibv_query_gid)
UNUSED_POINTER(ibv_alloc_pd)
UNUSED_STATUS(ibv_dealloc_pd)
UNUSED_POINTER(ibv_reg_mr)
UNUSED_STATUS(ibv_dereg_mr)
UNUSED_POINTER(ibv_create_cq)
UNUSED_STATUS(ibv_destroy_cq)
UNUSED_POINTER(ibv_create_qp)
UNUSED_STATUS(ibv_modify_qp)
UNUSED_STATUS(ibv_destroy_qp)
