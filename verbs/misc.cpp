// The rest of libibverbs' public surface: the strings of its enums, IB rate conversions, fork
// support, the sysfs helpers (answered for vfab's devices, which have no sysfs directory), and
// the calls that need a kernel device (import, ECE), which fail with EOPNOTSUPP.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "objects.hpp"

using namespace vfab::verbs;

// ---- strings (the words rdma-core prints, so that programs' output reads the same) -------------

const char* ibv_node_type_str(ibv_node_type t) {
    switch (t) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    case IBV_NODE_USNIC: return "usNIC";
    case IBV_NODE_USNIC_UDP: return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED: return "unspecified";
    default: return "unknown";
    }
}

const char* ibv_port_state_str(ibv_port_state s) {
    static const char* const words[] = {"no state change (NOP)", "down", "init", "armed", "active", "active defer"};
    return unsigned(s) < std::size(words) ? words[s] : "unknown";
}

const char* ibv_event_type_str(ibv_event_type e) {
    static const char* const words[] = {"CQ error",
                                        "local work queue catastrophic error",
                                        "invalid request local work queue error",
                                        "local access violation work queue error",
                                        "communication established",
                                        "send queue drained",
                                        "path migrated",
                                        "path migration request error",
                                        "local catastrophic error",
                                        "port active",
                                        "port error",
                                        "LID change",
                                        "P_Key change",
                                        "SM change",
                                        "SRQ catastrophic error",
                                        "SRQ limit reached",
                                        "last WQE reached",
                                        "client reregistration",
                                        "GID table change",
                                        "WQ fatal"};
    return unsigned(e) < std::size(words) ? words[e] : "unknown";
}

const char* ibv_wc_status_str(ibv_wc_status s) {
    if (s == IBV_WC_TM_ERR) return "TM error";
    if (s == IBV_WC_TM_RNDV_INCOMPLETE) return "TM software rendezvous";
    if (unsigned(s) > IBV_WC_GENERAL_ERR) return "unknown";
    return vfab::rdma::to_string(vfab::rdma::RdmaWcStatus(s));
}

// ---- IB rates (IB spec 9.7: static rate, as multiples of 2.5 Gb/s and in Mb/s) -------------------

namespace {
struct RateRow {
    ibv_rate rate;
    int mult;   // of 2.5 Gb/s; -1 for the rates that are not a multiple
    int mbps;
};
constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},      {IBV_RATE_5_GBPS, 2, 5000},        {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},      {IBV_RATE_30_GBPS, 12, 30000},     {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},     {IBV_RATE_80_GBPS, 32, 80000},     {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, -1, 14062},     {IBV_RATE_56_GBPS, -1, 56250},     {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},   {IBV_RATE_25_GBPS, -1, 25781},     {IBV_RATE_100_GBPS, -1, 103125},
    {IBV_RATE_200_GBPS, -1, 206250},   {IBV_RATE_300_GBPS, -1, 309375},   {IBV_RATE_28_GBPS, -1, 28125},
    {IBV_RATE_50_GBPS, -1, 53125},     {IBV_RATE_400_GBPS, -1, 425000},   {IBV_RATE_600_GBPS, -1, 637500},
    {IBV_RATE_800_GBPS, -1, 850000},   {IBV_RATE_1200_GBPS, -1, 1275000},
};
}  // namespace

int ibv_rate_to_mult(ibv_rate rate) {
    for (const RateRow& r : kRates)
        if (r.rate == rate) return r.mult;
    return rate == IBV_RATE_MAX ? 0 : -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
    for (const RateRow& r : kRates)
        if (r.mult == mult) return r.rate;
    return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
    for (const RateRow& r : kRates)
        if (r.rate == rate) return r.mbps;
    return rate == IBV_RATE_MAX ? 0 : -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
    for (const RateRow& r : kRates)
        if (r.mbps == mbps) return r.rate;
    return IBV_RATE_MAX;
}

// ---- fork ---------------------------------------------------------------------------------------
// Memory is pinned by VFIO (pin_user_pages): kernels since 5.13 copy pinned pages into a child at
// fork instead of sharing them copy-on-write, so the parent's DMA stays right without
// MADV_DONTFORK. The range calls still set it for programs that ask.

int ibv_fork_init(void) { return 0; }

ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

namespace {
int advise_range(void* base, size_t size, int advice) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t start = reinterpret_cast<uintptr_t>(base) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(base) + size + page - 1) & ~(page - 1);
    return madvise(reinterpret_cast<void*>(start), end - start, advice) ? errno : 0;
}
}  // namespace

extern "C" int ibv_dontfork_range(void* base, size_t size) { return advise_range(base, size, MADV_DONTFORK); }
extern "C" int ibv_dofork_range(void* base, size_t size) { return advise_range(base, size, MADV_DOFORK); }

// ---- sysfs ------------------------------------------------------------------------------------------

extern "C" const char* ibv_get_sysfs_path(void) { return "/sys"; }

// The RDMA class files of a vfab device, which exist nowhere (ibv_devinfo reads board_id; others
// node_type, ...); any other file is read as rdma-core does: one line, no newline.
extern "C" int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
    if (!dir || !file || !buf || !size) return fail(EINVAL), -1;
    Library& lib = library();
    std::unique_lock g(lib.mu);   // discover() may add devices meanwhile
    for (Device* d : lib.devices) {
        if (std::strcmp(dir, d->head.ibdev.ibdev_path) != 0 && std::strcmp(dir, d->head.ibdev.dev_path) != 0) continue;
        std::string v;
        if (!std::strcmp(file, "board_id")) v = "vfab_" + d->cfg.bdf;
        else if (!std::strcmp(file, "node_type")) v = "1: CA";
        else if (!std::strcmp(file, "ibdev")) v = d->cfg.name;
        else if (!std::strcmp(file, "abi_version")) v = "1";
        else break;   // the PCI function's own files (numa_node, local_cpus, ...)
        return std::snprintf(buf, size, "%s", v.c_str());
    }
    g.unlock();
    const std::string path = std::string(dir) + "/" + file;
    std::ifstream in(path);
    if (!in) return fail(ENOENT), -1;
    std::string line;
    std::getline(in, line);
    return std::snprintf(buf, size, "%s", line.c_str());
}

// ---- what needs a kernel device -------------------------------------------------------------------

ibv_context* ibv_import_device(int) { return fail_null<ibv_context>(EOPNOTSUPP); }
ibv_pd* ibv_import_pd(ibv_context*, uint32_t) { return fail_null<ibv_pd>(EOPNOTSUPP); }
void ibv_unimport_pd(ibv_pd*) {}
ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) { return fail_null<ibv_mr>(EOPNOTSUPP); }
void ibv_unimport_mr(ibv_mr*) {}
ibv_dm* ibv_import_dm(ibv_context*, uint32_t) { return fail_null<ibv_dm>(EOPNOTSUPP); }
void ibv_unimport_dm(ibv_dm*) {}
int ibv_set_ece(ibv_qp*, ibv_ece*) { return fail(EOPNOTSUPP); }
int ibv_query_ece(ibv_qp*, ibv_ece*) { return fail(EOPNOTSUPP); }
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t[ETHERNET_LL_SIZE], uint16_t*) {
    return fail(EOPNOTSUPP);
}

// rdma-core's marshalling between the kernel's command structures and the verbs ones: no
// kernel here, nothing to copy.
extern "C" void ibv_copy_qp_attr_from_kern(void*, const void*) {}
extern "C" void ibv_copy_ah_attr_from_kern(void*, const void*) {}
extern "C" void ibv_copy_path_rec_from_kern(void*, const void*) {}
extern "C" void ibv_copy_path_rec_to_kern(void*, const void*) {}

// The one private data symbol: whether destroying objects of a disassociated device succeeds.
extern "C" {
bool verbs_allow_disassociate_destroy = false;
}
