/* The lab traffic through vfab's C API, written in C (vfab_c_traffic.c). */
#ifndef VFAB_LAB_C_TRAFFIC_H
#define VFAB_LAB_C_TRAFFIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opens both NICs with `backend` (enum vfab_iommu_backend), sends `count` frames from tx to rx
 * and checks each, the statistics and ENODEV after destroy. 0, or 1 with the reason in why. */
int vfab_c_traffic(const char *tx_pci, const char *rx_pci, int backend, uint32_t count, double *seconds, char *why,
                   size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
