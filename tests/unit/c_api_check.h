/* C API checks written in C (c_api_check.c), run by c_api_test.cpp. */
#ifndef VFAB_TESTS_C_API_CHECK_H
#define VFAB_TESTS_C_API_CHECK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int c_api_null_handles(char *why, size_t why_len);
int c_api_loopback(const char *pci, const char *sysfs_root, const char *provider_dir, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
