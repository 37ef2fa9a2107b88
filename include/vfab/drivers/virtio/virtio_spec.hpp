// Constants and layouts from the VIRTIO 1.2 specification (OASIS, virtio-v1.2-cs01), for the
// virtqueues and the network device. Section numbers are the specification's.
//
// Everything in a virtio 1.x ring or header is little-endian (§2.7.2, §5.1.6.1); vfab runs on
// little-endian x86-64 only, so the structs are used as they lie in memory.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace vfab::virtio {

static_assert(std::endian::native == std::endian::little, "virtio 1.x rings are little-endian");

// ---- device status (§2.1) ---------------------------------------------------------------------
namespace status {
inline constexpr uint8_t ACKNOWLEDGE = 1;
inline constexpr uint8_t DRIVER = 2;
inline constexpr uint8_t DRIVER_OK = 4;
inline constexpr uint8_t FEATURES_OK = 8;
inline constexpr uint8_t DEVICE_NEEDS_RESET = 64;
inline constexpr uint8_t FAILED = 128;
}  // namespace status

// ---- feature bits: bit numbers, not masks (§2.2) -----------------------------------------------
// Device-independent ("reserved") feature bits, §6.
namespace feature {
inline constexpr unsigned INDIRECT_DESC = 28;     // §2.7.5.3, §2.8.7
inline constexpr unsigned EVENT_IDX = 29;         // used_event/avail_event, §2.7.7, §2.7.10
inline constexpr unsigned VERSION_1 = 32;
inline constexpr unsigned ACCESS_PLATFORM = 33;   // the device goes through the IOMMU
inline constexpr unsigned RING_PACKED = 34;       // §2.8
inline constexpr unsigned IN_ORDER = 35;          // §2.7.9, §2.8.8
inline constexpr unsigned ORDER_PLATFORM = 36;    // real DMA barriers (hardware devices)
inline constexpr unsigned SR_IOV = 37;
inline constexpr unsigned NOTIFICATION_DATA = 38; // §2.9
inline constexpr unsigned NOTIF_CONFIG_DATA = 39;
inline constexpr unsigned RING_RESET = 40;        // §2.6.1
}  // namespace feature

// virtio-net feature bits, §5.1.3.
namespace net_feature {
inline constexpr unsigned CSUM = 0;               // device completes partial checksums (transmit)
inline constexpr unsigned GUEST_CSUM = 1;         // driver accepts partial checksums (receive)
inline constexpr unsigned CTRL_GUEST_OFFLOADS = 2;
inline constexpr unsigned MTU = 3;
inline constexpr unsigned MAC = 5;
inline constexpr unsigned GUEST_TSO4 = 7;
inline constexpr unsigned GUEST_TSO6 = 8;
inline constexpr unsigned GUEST_ECN = 9;
inline constexpr unsigned GUEST_UFO = 10;
inline constexpr unsigned HOST_TSO4 = 11;
inline constexpr unsigned HOST_TSO6 = 12;
inline constexpr unsigned HOST_ECN = 13;
inline constexpr unsigned HOST_UFO = 14;
inline constexpr unsigned MRG_RXBUF = 15;
inline constexpr unsigned STATUS = 16;
inline constexpr unsigned CTRL_VQ = 17;
inline constexpr unsigned CTRL_RX = 18;
inline constexpr unsigned CTRL_VLAN = 19;
inline constexpr unsigned CTRL_RX_EXTRA = 20;     // §5.1.6.5.1
inline constexpr unsigned GUEST_ANNOUNCE = 21;
inline constexpr unsigned MQ = 22;
inline constexpr unsigned CTRL_MAC_ADDR = 23;
inline constexpr unsigned HOST_USO = 56;
inline constexpr unsigned HASH_REPORT = 57;
inline constexpr unsigned GUEST_HDRLEN = 59;
inline constexpr unsigned RSS = 60;
inline constexpr unsigned RSC_EXT = 61;
inline constexpr unsigned STANDBY = 62;
inline constexpr unsigned SPEED_DUPLEX = 63;
}  // namespace net_feature

// The mask of feature bit number `bit` (a feature:: or net_feature:: value), to build a set.
constexpr uint64_t feature_bit(unsigned bit) { return uint64_t(1) << bit; }
// Whether bit number `bit` is set in `features` (a set offered or negotiated).
constexpr bool has_feature(uint64_t features, unsigned bit) { return (features >> bit) & 1; }

// ---- split virtqueue (§2.7) -------------------------------------------------------------------
inline constexpr uint32_t kSplitMaxSize = 32768;   // a power of 2, §2.7

// Descriptor table entry, §2.7.5.
struct SplitDesc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
};
static_assert(sizeof(SplitDesc) == 16);

namespace desc_flags {
inline constexpr uint16_t NEXT = 1;        // continues in `next` (split) / the next slot (packed)
inline constexpr uint16_t WRITE = 2;       // device-writable (else device-readable)
inline constexpr uint16_t INDIRECT = 4;    // the buffer is a table of descriptors
inline constexpr uint16_t AVAIL = 1u << 7;   // packed only, §2.8.1
inline constexpr uint16_t USED = 1u << 15;   // packed only, §2.8.1
}  // namespace desc_flags

// Available ring (Driver Area), §2.7.6: le16 flags; le16 idx; le16 ring[size]; le16 used_event.
namespace avail {
inline constexpr uint16_t F_NO_INTERRUPT = 1;   // §2.7.7, only without EVENT_IDX
inline constexpr size_t kFlagsOffset = 0;
inline constexpr size_t kIdxOffset = 2;
inline constexpr size_t kRingOffset = 4;
// Offset of used_event (after ring[size]); the device reads it only with EVENT_IDX (§2.7.7).
constexpr size_t used_event_offset(uint32_t size) { return kRingOffset + 2 * size_t(size); }
// Bytes of the Driver Area of a queue of `size` entries, used_event included.
constexpr size_t bytes(uint32_t size) { return 6 + 2 * size_t(size); }
}  // namespace avail

// Used ring element, §2.7.8.
struct UsedElem {
    uint32_t id;    // head of the used descriptor chain
    uint32_t len;   // bytes written into the device-writable part
};
static_assert(sizeof(UsedElem) == 8);

// Used ring (Device Area), §2.7.8: le16 flags; le16 idx; UsedElem ring[size]; le16 avail_event.
namespace used {
inline constexpr uint16_t F_NO_NOTIFY = 1;   // §2.7.10, only without EVENT_IDX
inline constexpr size_t kFlagsOffset = 0;
inline constexpr size_t kIdxOffset = 2;
inline constexpr size_t kRingOffset = 4;
// Offset of avail_event (after ring[size]); the device writes it only with EVENT_IDX (§2.7.10).
constexpr size_t avail_event_offset(uint32_t size) { return kRingOffset + 8 * size_t(size); }
// Bytes of the Device Area of a queue of `size` entries, avail_event included.
constexpr size_t bytes(uint32_t size) { return 6 + 8 * size_t(size); }
}  // namespace used

// Alignments of the three parts, §2.7 (table) and §2.8.10.1.
inline constexpr size_t kDescAlign = 16;
inline constexpr size_t kSplitAvailAlign = 2;
inline constexpr size_t kSplitUsedAlign = 4;
inline constexpr size_t kPackedEventAlign = 4;

// §2.7.7 / §2.7.10 (vring_need_event): having moved an index from `old_idx` to `new_idx`, is
// `event_idx` one of the entries just written, i.e. in [old_idx, new_idx) modulo 2^16?
constexpr bool need_event(uint16_t event_idx, uint16_t new_idx, uint16_t old_idx) {
    return uint16_t(new_idx - event_idx - 1) < uint16_t(new_idx - old_idx);
}

// ---- packed virtqueue (§2.8) ------------------------------------------------------------------
inline constexpr uint32_t kPackedMaxSize = 32768;   // 2^15; need not be a power of 2

// Descriptor, §2.8.13.
struct PackedDesc {
    uint64_t addr;
    uint32_t len;
    uint16_t id;      // buffer ID (in the last descriptor of a chain, §2.8.6)
    uint16_t flags;
};
static_assert(sizeof(PackedDesc) == 16);
static_assert(offsetof(PackedDesc, id) == 12 && offsetof(PackedDesc, flags) == 14);

// Event suppression structure (Driver Area and Device Area), §2.8.14.
struct EventSuppress {
    uint16_t off_wrap;   // desc_event_off (bits 14:0), desc_event_wrap (bit 15)
    uint16_t flags;      // desc_event_flags (bits 1:0)
};
static_assert(sizeof(EventSuppress) == 4);

namespace event_flags {   // §2.8.10
inline constexpr uint16_t ENABLE = 0;
inline constexpr uint16_t DISABLE = 1;
inline constexpr uint16_t DESC = 2;     // only with EVENT_IDX: at off_wrap
inline constexpr uint16_t MASK = 3;
inline constexpr unsigned kWrapShift = 15;
}  // namespace event_flags

// ---- virtio-net (§5.1) ------------------------------------------------------------------------
// Virtqueue indices, §5.1.2: receiveq k = 2k, transmitq k = 2k + 1, controlq = 2N.
constexpr uint16_t rx_queue_index(uint16_t pair) { return uint16_t(2 * pair); }
// The transmitq of queue pair `pair` (0-based): 2 * pair + 1.
constexpr uint16_t tx_queue_index(uint16_t pair) { return uint16_t(2 * pair + 1); }
// The controlq of a device with `pairs` queue pairs (max_virtqueue_pairs with MQ or RSS, else
// 1): 2 * pairs.
constexpr uint16_t ctrl_queue_index(uint16_t pairs) { return uint16_t(2 * pairs); }

// Device configuration layout, §5.1.4 (fields past `status` exist only with their features).
struct NetConfig {
    uint8_t mac[6];
    uint16_t status;                 // NET_F_STATUS
    uint16_t max_virtqueue_pairs;    // NET_F_MQ or NET_F_RSS
    uint16_t mtu;                    // NET_F_MTU
    uint32_t speed;                  // NET_F_SPEED_DUPLEX: Mbit/s, 0xffffffff unknown
    uint8_t duplex;                  // 1 full, 0 half, 0xff unknown
    uint8_t rss_max_key_size;
    uint16_t rss_max_indirection_table_length;
    uint32_t supported_hash_types;
};
static_assert(sizeof(NetConfig) == 24);
static_assert(offsetof(NetConfig, status) == 6 && offsetof(NetConfig, max_virtqueue_pairs) == 8);
static_assert(offsetof(NetConfig, mtu) == 10 && offsetof(NetConfig, speed) == 12);
static_assert(offsetof(NetConfig, duplex) == 16 && offsetof(NetConfig, supported_hash_types) == 20);

namespace net_status {
inline constexpr uint16_t LINK_UP = 1;
inline constexpr uint16_t ANNOUNCE = 2;
}  // namespace net_status

// The header in front of every frame on the receive and transmit queues, §5.1.6. With
// VERSION_1 it is always 12 bytes (num_buffers is present even without MRG_RXBUF); with
// HASH_REPORT 8 more bytes follow (not modelled here).
struct NetHdr {
    uint8_t flags = 0;
    uint8_t gso_type = 0;
    uint16_t hdr_len = 0;
    uint16_t gso_size = 0;
    uint16_t csum_start = 0;
    uint16_t csum_offset = 0;
    uint16_t num_buffers = 0;   // receive with MRG_RXBUF: buffers this frame spans
};
static_assert(sizeof(NetHdr) == 12);
static_assert(offsetof(NetHdr, hdr_len) == 2 && offsetof(NetHdr, csum_start) == 6);
static_assert(offsetof(NetHdr, num_buffers) == 10);

namespace net_hdr {
inline constexpr uint8_t F_NEEDS_CSUM = 1;   // checksum from csum_start, stored at +csum_offset
inline constexpr uint8_t F_DATA_VALID = 2;   // receive: the checksum was verified
inline constexpr uint8_t F_RSC_INFO = 4;
inline constexpr uint8_t GSO_NONE = 0;
inline constexpr uint8_t GSO_TCPV4 = 1;
inline constexpr uint8_t GSO_UDP = 3;
inline constexpr uint8_t GSO_TCPV6 = 4;
inline constexpr uint8_t GSO_UDP_L4 = 5;
inline constexpr uint8_t GSO_ECN = 0x80;
}  // namespace net_hdr

// Control virtqueue, §5.1.6.5: {u8 class; u8 command; data...} device-readable, then one
// device-writable ack byte.
struct NetCtrlHdr {
    uint8_t cls = 0;
    uint8_t cmd = 0;
};
static_assert(sizeof(NetCtrlHdr) == 2);

namespace net_ctrl {
inline constexpr uint8_t OK = 0;    // ack values
inline constexpr uint8_t ERR = 1;

inline constexpr uint8_t RX = 0;    // §5.1.6.5.1, data: one byte, 0 off / 1 on
inline constexpr uint8_t RX_PROMISC = 0;
inline constexpr uint8_t RX_ALLMULTI = 1;
inline constexpr uint8_t RX_ALLUNI = 2;     // these four need CTRL_RX_EXTRA
inline constexpr uint8_t RX_NOMULTI = 3;
inline constexpr uint8_t RX_NOUNI = 4;
inline constexpr uint8_t RX_NOBCAST = 5;

inline constexpr uint8_t MAC = 1;   // §5.1.6.5.2
inline constexpr uint8_t MAC_TABLE_SET = 0;
inline constexpr uint8_t MAC_ADDR_SET = 1;

inline constexpr uint8_t VLAN = 2;  // §5.1.6.5.3, data: le16 vlan id
inline constexpr uint8_t VLAN_ADD = 0;
inline constexpr uint8_t VLAN_DEL = 1;

inline constexpr uint8_t ANNOUNCE = 3;   // §5.1.6.5.4
inline constexpr uint8_t ANNOUNCE_ACK = 0;

inline constexpr uint8_t MQ = 4;    // §5.1.6.5.5 - §5.1.6.5.7
inline constexpr uint8_t MQ_VQ_PAIRS_SET = 0;   // data: le16 virtqueue_pairs
inline constexpr uint8_t MQ_RSS_CONFIG = 1;
inline constexpr uint8_t MQ_HASH_CONFIG = 2;
inline constexpr uint16_t MQ_VQ_PAIRS_MIN = 1;
inline constexpr uint16_t MQ_VQ_PAIRS_MAX = 0x8000;

inline constexpr uint8_t GUEST_OFFLOADS = 5;   // §5.1.6.5.8, data: le64 offload feature bits
inline constexpr uint8_t GUEST_OFFLOADS_SET = 0;
}  // namespace net_ctrl

}  // namespace vfab::virtio
