// What an RDMA port can do (ibv_query_device): struct ibv_device_attr field for field, so that
// a verbs library over vfab copies it, and vfab's own capability bits for what verbs has no
// flag for. The transport is software over the provider's raw queue pair, so the verbs are
// the same on every provider; what differs by device (path MTU, device memory) is reported
// from the device (docs/rdma.md, "Capabilities").
#pragma once

#include <cstdint>

namespace vfab::rdma {

// enum ibv_device_cap_flags: the ones the transport has.
enum DeviceCapFlags : uint32_t {
    device_resize_max_wr = 1u << 0,           // an SRQ grows (modify_srq max_wr)
    device_curr_qp_state_mod = 1u << 7,       // modify_qp takes cur_qp_state
    device_rc_rnr_nak_gen = 1u << 12,         // the responder sends RNR NAKs
    device_srq_resize = 1u << 13,
    device_n_notify_cq = 1u << 14,            // Cq::arm(solicited_only)
    device_mem_window = 1u << 17,             // memory windows (type 1)
    device_xrc = 1u << 20,
    device_mem_mgt_extensions = 1u << 21,     // allocate L_Key, fast registration, local/remote invalidation
    device_mem_window_type_2b = 1u << 24,
    device_managed_flow_steering = 1u << 29,  // flows steer frames to raw-packet queue pairs (Port::create_flow)
};

// enum ibv_atomic_cap.
enum class AtomicCap : uint32_t { none = 0, hca = 1, glob = 2 };

// struct ibv_device_attr, field for field (tests/unit/rdma_verbs_abi_test.cpp).
struct VerbsDeviceAttr {
    char fw_ver[64] = {};
    uint64_t node_guid = 0;        // network byte order, as ibv's __be64
    uint64_t sys_image_guid = 0;
    uint64_t max_mr_size = 0;
    uint64_t page_size_cap = 0;    // bit n: blocks of 2^n bytes in a fast registration
    uint32_t vendor_id = 0;        // the NIC's PCI IDs
    uint32_t vendor_part_id = 0;
    uint32_t hw_ver = 0;
    int max_qp = 0;
    int max_qp_wr = 0;
    uint32_t device_cap_flags = 0; // DeviceCapFlags
    int max_sge = 0;
    int max_sge_rd = 0;
    int max_cq = 0;
    int max_cqe = 0;
    int max_mr = 0;                // MRs and windows share the protection domain's table
    int max_pd = 0;
    int max_qp_rd_atom = 0;        // READs/atomics a QP answers at once (max_dest_rd_atomic)
    int max_ee_rd_atom = 0;
    int max_res_rd_atom = 0;
    int max_qp_init_rd_atom = 0;   // ... and has outstanding (max_rd_atomic)
    int max_ee_init_rd_atom = 0;
    AtomicCap atomic_cap = AtomicCap::none;
    int max_ee = 0;
    int max_rdd = 0;
    int max_mw = 0;
    int max_raw_ipv6_qp = 0;
    int max_raw_ethy_qp = 0;
    int max_mcast_grp = 0;
    int max_mcast_qp_attach = 0;
    int max_total_mcast_qp_attach = 0;
    int max_ah = 0;
    int max_fmr = 0;
    int max_map_per_fmr = 0;
    int max_srq = 0;
    int max_srq_wr = 0;
    int max_srq_sge = 0;
    uint16_t max_pkeys = 0;
    uint8_t local_ca_ack_delay = 0;
    uint8_t phys_port_cnt = 0;
};

// vfab's capability bits: the extensions verbs has no flag for (docs/rdma-memory.md,
// docs/rdma-srq.md).
enum VfabCap : uint64_t {
    vfab_cap_reg_mr_wr = 1ull << 0,           // WrOpcode::reg_mr: fast registration from user space
    vfab_cap_zero_based = 1ull << 1,          // Access::zero_based MRs and windows
    vfab_cap_remote_invalidate = 1ull << 2,   // SEND_WITH_INV received invalidates
    vfab_cap_srq = 1ull << 3,                 // shared receive queues and their limit event
    vfab_cap_async_events = 1ull << 4,        // Port::get_async_event
    vfab_cap_masked_atomics = 1ull << 5,      // masked CMP_AND_SWP and FETCH_AND_ADD, 8 bytes, with vfab peers
    vfab_cap_block_self_mcast_lb = 1ull << 6, // RdmaQpCreateFlags::qp_create_block_self_mcast_lb
    vfab_cap_p2p_memory = 1ull << 7,          // MRs of another device's memory (register_device_memory; FI_MR_P2P)
    vfab_cap_dma_buf = 1ull << 8,             // MRs of a dma-buf (register_dmabuf)
    vfab_cap_uc = 1ull << 9,                  // unreliable connected queue pairs (QpType::uc)
};

struct DeviceCaps {
    VerbsDeviceAttr attr;
    uint64_t vfab_caps = 0;     // VfabCap
    uint32_t max_path_mtu = 0;  // enum ibv_mtu: the largest path MTU the link carries
};

}  // namespace vfab::rdma
