// The one call vfab's libibverbs exports beyond the system library's ABI, in a version node of
// its own (VFAB_VERBS_PRIVATE_1, verbs/private.map): vfab's librdmacm (rdmacm/) finds the RDMA
// port behind an ibv_context with it, through dlsym, so that it can run the connection manager
// on the port's QP1. A librdmacm that does not find it is not on vfab's libibverbs.
#pragma once

#include <infiniband/verbs.h>

namespace vfab::rdma {
class Port;
}

inline constexpr const char* kVfabVerbsPortHook = "vfab_verbs_port";
// The port of `ctx` (a context of vfab's libibverbs), never null for one.
using VfabVerbsPortHook = vfab::rdma::Port* (*)(ibv_context* ctx);
