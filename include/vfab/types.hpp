// The provider API's vocabulary, shared by every driver's direct API, the multiplexed API
// (vfab.hpp) and the C API (vfab.h): scatter/gather entries, work requests, completions,
// device attributes, statistics and asynchronous events.
//
// The layouts of Sge, SendWr, RecvWr and Completion are those of the C API's structs, so a C
// caller's arrays are passed through without copying (static_asserts in api/c_api.cpp).
// Status and flag values follow libibverbs (enum ibv_wc_status, ibv_send_flags) where verbs has
// the same idea.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "vfab/pci_address.hpp"

namespace vfab {

using MacAddress = std::array<uint8_t, 6>;   // an Ethernet address, in wire order

// One piece of a buffer: `length` bytes at virtual address `addr`, inside the memory region
// whose local key is `lkey` (the driver translates it through the MR table; it never lets the
// device touch memory outside the registration).
struct Sge {
    uint64_t addr = 0;
    uint32_t length = 0;
    uint32_t lkey = 0;
};

enum SendFlags : uint32_t {
    send_signaled = 1u << 1,   // IBV_SEND_SIGNALED: report a completion for this WR
    send_ip_csum = 1u << 4,    // IBV_SEND_IP_CSUM: the device fills the IPv4 header checksum
                               // and the TCP/UDP checksum (the driver seeds the pseudo-header)
    send_timestamp = 1u << 8,  // the device latches its clock when the frame leaves (IEEE 1588;
                               // where offload_tx_timestamp: igb's take_tx_timestamp())
};

// A frame to transmit: the concatenation of its SGEs (Ethernet header first, no FCS).
struct SendWr {
    uint64_t wr_id = 0;
    const Sge* sg_list = nullptr;
    uint32_t num_sge = 0;
    uint32_t flags = 0;   // SendFlags
};

// A buffer to receive one frame into.
struct RecvWr {
    uint64_t wr_id = 0;
    const Sge* sg_list = nullptr;
    uint32_t num_sge = 0;
    uint32_t reserved = 0;
};

// Values of enum ibv_wc_status.
enum class WcStatus : uint8_t {
    success = 0,
    local_length_error = 1,     // the frame did not fit (receive) or was too long (send)
    local_qp_op_error = 2,
    local_protection_error = 4, // bad lkey, stale key, SGE outside its MR, missing access right
    wr_flush_error = 5,         // the queue went to the error state before this WR completed
    general_error = 21,         // the device reported an error for this frame
};
// The status's name ("success", "local_protection_error", ...).
constexpr const char* to_string(WcStatus s) noexcept {
    switch (s) {
    case WcStatus::success: return "success";
    case WcStatus::local_length_error: return "local length error";
    case WcStatus::local_qp_op_error: return "local QP operation error";
    case WcStatus::local_protection_error: return "local protection error";
    case WcStatus::wr_flush_error: return "work request flushed";
    case WcStatus::general_error: return "general error";
    }
    return "unknown status";
}

enum class WcOpcode : uint8_t { send = 0, recv = 128 };   // IBV_WC_SEND, IBV_WC_RECV

enum CompletionFlags : uint16_t {
    wc_ip_csum_ok = 1u << 2,   // IBV_WC_IP_CSUM_OK: IPv4 header and TCP/UDP checksums verified
    wc_timestamped = 1u << 8,  // the device latched its clock when the frame arrived (IEEE 1588;
                               // where offload_rx_timestamp: igb's take_rx_timestamp())
};

struct Completion {
    uint64_t wr_id = 0;
    WcStatus status = WcStatus::success;
    WcOpcode opcode = WcOpcode::send;
    uint16_t flags = 0;       // CompletionFlags
    uint32_t byte_len = 0;    // receive: bytes written into the buffer (the frame, no FCS)
    uint32_t qp_num = 0;
    uint32_t reserved = 0;
};

// What post_send/post_recv did: `posted` WRs from the front of the batch were queued; when
// `error` is not 0 (an errno value) the WR at index `posted` was refused and none after it was
// looked at. EINVAL: malformed WR (SGE count, length); ENOMEM: the queue is full; EIO: the
// queue pair is in the error state; ENODEV: it was destroyed.
struct [[nodiscard]] PostResult {
    int error = 0;
    uint32_t posted = 0;
    // Whether every WR was posted.
    explicit operator bool() const { return error == 0; }
};

enum class QpState : uint8_t { ready, error, destroyed };

struct QpCaps {
    uint32_t max_send_wr = 256;   // ring sizes: rounded up to what the device supports
    uint32_t max_recv_wr = 256;
    uint32_t max_send_sge = 1;
    uint32_t max_recv_sge = 1;
};

struct LinkState {
    bool up = false;
    uint32_t speed_mbps = 0;
    bool full_duplex = false;
};

enum Offloads : uint32_t {
    offload_tx_ip_csum = 1u << 0,   // send_ip_csum works
    offload_rx_ip_csum = 1u << 1,   // receive completions carry wc_ip_csum_ok
    offload_tx_timestamp = 1u << 2,  // send_timestamp works
    offload_rx_timestamp = 1u << 3,  // PTP event frames are timestamped (wc_timestamped)
};

struct DeviceAttr {
    std::string provider;          // "e1000e"
    std::string name;              // "Intel 82574L"
    PciAddress address;
    uint16_t vendor_id = 0;
    uint16_t device_id = 0;
    uint8_t mac[6] = {};
    uint32_t mtu = 1500;           // largest frame is mtu + 14 (no VLAN tag, no FCS)
    uint32_t max_qp = 1;
    uint32_t max_cq = 1;
    uint32_t max_qp_wr = 0;
    uint32_t max_send_sge = 1;
    uint32_t max_recv_sge = 1;
    uint32_t recv_buffer_size = 0; // every receive buffer must hold this many bytes
    uint32_t offloads = 0;         // Offloads
    uint32_t interrupt_vectors = 0;
    // Receive-side scaling (0: the device has none): the Toeplitz key's size in bytes, the
    // largest redirection table, and the RssHash types the device can hash.
    uint32_t rss_key_size = 0;
    uint32_t rss_table_size = 0;
    uint32_t rss_hash_types = 0;
    // The bytes a queue pair created with qp_create_hdr_in_headroom (vfab.hpp; a driver's
    // QpInitAttr::hdr_in_headroom) needs free before each WR's first SGE, for a header of the
    // provider's own in front of every frame (virtio-net: the 12-byte virtio_net_hdr); 0: the
    // provider puts none there and ignores the flag. (Last, so that the fields before it stay
    // where programs built before it read them.)
    uint32_t frame_headroom = 0;
};

// What receive-side scaling hashes (the values of virtio's VIRTIO_NET_RSS_HASH_TYPE_*). A
// frame of a type not enabled goes to the table's first entry's queue.
enum RssHash : uint32_t {
    rss_ipv4 = 1u << 0,       // source and destination addresses
    rss_tcp_ipv4 = 1u << 1,   // addresses and ports
    rss_udp_ipv4 = 1u << 2,
    rss_ipv6 = 1u << 3,
    rss_tcp_ipv6 = 1u << 4,
    rss_udp_ipv6 = 1u << 5,
};

// Receive-side scaling: a frame's Toeplitz hash (net/rss.hpp computes the same) picks entry
// hash % table.size() of `table`, a queue index (QueuePair::queue()), so an application can
// spread flows over queue pairs and threads.
struct RssConfig {
    std::span<const uint8_t> key;      // attr.rss_key_size bytes
    std::span<const uint16_t> table;   // a power of 2 entries, 1 to attr.rss_table_size
    uint32_t hash_types = 0;           // RssHash bits; 0 turns RSS off (all to table[0])
};

// Counters of one queue pair, kept by the driver in software. Receives count when they
// complete good. Sends count when they complete good, or — on the Intel family, as DPDK counts
// them — when posted, taken back if they then fail or are flushed; once every send completed
// the two agree.
struct QpStats {
    uint64_t tx_packets = 0;
    uint64_t tx_bytes = 0;
    uint64_t rx_packets = 0;
    uint64_t rx_bytes = 0;
};

// Counters since the device was opened (hardware counters are read-to-clear: the driver
// accumulates them).
struct DeviceStats {
    uint64_t rx_packets = 0;
    uint64_t rx_bytes = 0;
    uint64_t tx_packets = 0;
    uint64_t tx_bytes = 0;
    uint64_t rx_missed = 0;       // dropped: no receive buffer posted
    uint64_t rx_crc_errors = 0;
    uint64_t rx_errors = 0;       // other receive errors (length, symbol, sequence)
    uint64_t rx_broadcast = 0;
    uint64_t rx_multicast = 0;
};

// IEEE 1588 hardware timestamps (where attr().offloads has offload_tx_timestamp /
// offload_rx_timestamp): the device's clock in nanoseconds, and the times frames left and
// arrived on it.
struct TimestampConfig {
    bool tx = true;   // WRs with send_timestamp latch their departure time (one latch: take it before the next)
    bool rx = true;   // PTPv2 frames over Ethernet (EtherType 0x88F7) latch their arrival time
    // Which PTP message: the header's first byte, transportSpecific << 4 | messageType (0: Sync).
    uint8_t rx_message = 0;
};
struct RxTimestamp {
    uint64_t ns = 0;            // when the frame arrived
    uint64_t source = 0;        // the 6 bytes before the sequence id (the end of sourcePortIdentity)
    uint16_t sequence_id = 0;   // the PTP header's sequenceId, as the device reads it
};

// Asynchronous events, read from Device::event_fd() with next_event() (like ibv_get_async_event).
enum class EventType : uint8_t {
    none,
    link_up,
    link_down,
    device_fatal,      // the device stopped working (it was reset behind the driver's back):
                       // every queue pair is in the error state; close the device
    device_removal,    // the kernel asks for the device back (unbind, hot unplug): queues are
                       // in the error state; close the device to let the removal finish
    device_reset,      // the device's owner reset it (a VF's PF went down or restarted): queue
                       // pairs are in the error state; reset() once it is back, then create
                       // them again
};
// The event's name ("none", "link_up", "device_removal", ...).
constexpr const char* to_string(EventType e) noexcept {
    switch (e) {
    case EventType::none: return "none";
    case EventType::link_up: return "link up";
    case EventType::link_down: return "link down";
    case EventType::device_fatal: return "device fatal error";
    case EventType::device_removal: return "device removal requested";
    case EventType::device_reset: return "device reset by its owner";
    }
    return "unknown event";
}

struct Event {
    EventType type = EventType::none;
};

}  // namespace vfab
