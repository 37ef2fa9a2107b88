/* The RDMA transport's C API checked from C (c_rdma_check.c), run by c_api_test.cpp. */
#ifndef VFAB_TESTS_C_RDMA_CHECK_H
#define VFAB_TESTS_C_RDMA_CHECK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int c_rdma_loopback(const char *pci, const char *sysfs_root, const char *provider_dir, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
