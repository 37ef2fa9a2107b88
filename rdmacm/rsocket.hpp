// rsockets over vfab (docs/cm.md, "rsockets"): the stream sockets of <rdma/rsocket.h>, speaking
// the protocol of rdma-core's rsockets (version 1) so that either end may be Debian's librdmacm
// on the kernel's rdma_cm. A socket is a synchronous rdma_cm id (RDMA_PS_TCP) with an RC QP.
//
// The protocol, in short:
// - The REQ's and REP's private data carry ConnData: the receive buffer's first half and where
//   the peer writes the next halves (a table of two Sge, the "target SGL"), and the credits.
// - Data goes as RDMA WRITE with immediate into the peer's receive buffer, in order, never
//   across the end of a half; the immediate says RS_OP_DATA and the length. The receiver knows
//   the place from the order alone.
// - The receiver gives space back by writing the next free half into the sender's target SGL
//   (an RDMA WRITE with immediate RS_OP_SGL and the new credit limit), or only the credits
//   (a zero-length one) when no half is free.
// - Control messages are zero-length WRITEs with immediate RS_OP_CTRL: DISCONNECT, SHUTDOWN.
// Private to rdmacm/.
#pragma once

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include <cstdint>
#include <vector>

namespace vfab::rdmacm::rs {

// ---- the wire (rdma-core's rsockets, protocol version 1) ----------------------------------------
inline constexpr uint8_t kVersion = 1;
inline constexpr uint8_t kFlagNet = 1 << 0;     // the sender is big-endian (its SGEs are)
inline constexpr uint8_t kFlagIomap = 1 << 1;   // an iomap table follows the target SGL
// The immediate: op in bits 31:29, data in 28:0 (big-endian on the wire).
inline constexpr uint32_t kOpData = 0, kOpWrite = 2, kOpSgl = 4, kOpIomapSgl = 6, kOpCtrl = 7;
inline constexpr uint32_t kCtrlDisconnect = 0, kCtrlKeepalive = 1, kCtrlShutdown = 2;
constexpr uint32_t message(uint32_t op, uint32_t data) noexcept { return op << 29 | (data & 0x1FFFFFFFu); }
constexpr uint32_t op_of(uint32_t m) noexcept { return m >> 29; }
constexpr uint32_t data_of(uint32_t m) noexcept { return m & 0x1FFFFFFFu; }
inline constexpr uint32_t kSglEntries = 2;    // the target SGL's entries
inline constexpr uint32_t kCtrlSlots = 4;     // control messages in flight at most
inline constexpr uint32_t kSendLowWater = 2048;
inline constexpr uint32_t kFirstChunk = 2048, kMaxChunk = 65536;   // a send's writes: 2 KiB, doubling to 64 KiB
inline constexpr uint32_t kQpMin = 16, kQpMax = 0xFFFE;
inline constexpr uint64_t kRecvWrId = uint64_t(1) << 63;   // a receive's wr_id; a send's is its message

// A buffer: in the target SGL in its owner's byte order; in ConnData big-endian.
struct Sge {
    uint64_t addr;
    uint32_t key;
    uint32_t length;
};
struct ConnData {
    uint8_t version;
    uint8_t flags;
    uint16_t credits;          // big-endian: the receives the sender posted
    uint8_t reserved[3];
    uint8_t iomap_size;        // vfab offers none
    Sge target_sgl;            // its length: the entries
    Sge data_buf;              // the receive buffer's first half
};
static_assert(sizeof(Sge) == 16 && sizeof(ConnData) == 40);

// ---- a socket ------------------------------------------------------------------------------------
enum class State : uint8_t { init, bound, listening, connected, disconnected, error, connect_error };

struct Socket {
    int fd = -1;                    // what the program holds: the id's event channel's fd
    rdma_cm_id* id = nullptr;
    State state = State::init;
    bool readable = false, writable = false;
    int fd_flags = 0;               // O_NONBLOCK
    int err = 0;                    // SO_ERROR
    uint32_t opts = 0;              // flag options set (bit per option, for rgetsockopt)
    // Sizes (rsetsockopt before connecting; an accepted socket has its listener's).
    uint32_t sq_size = 384, rq_size = 384, sq_inline = 64, sbuf_size = 131072, rbuf_size = 131072;
    // The connection's verbs objects.
    ibv_comp_channel* channel = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* smr = nullptr;          // the send buffer
    ibv_mr* rmr = nullptr;          // the target SGL, then the receive buffer: the peer writes both
    uint8_t* rmem = nullptr;
    uint8_t* sbuf = nullptr;
    uint8_t* rbuf = nullptr;
    Sge* target_sgl = nullptr;      // where the peer gives this side room to write (in rmem)
    // Sending.
    uint16_t sseq_no = 0, sseq_comp = 0;   // data messages sent; the peer's limit
    uint32_t sqe_avail = 0, sbuf_avail = 0, sbuf_head = 0;
    uint32_t ctrl_seqno = 0, ctrl_max_seqno = kCtrlSlots;
    uint32_t target_sge = 0;
    Sge remote_sgl{};               // the peer's target SGL (host order)
    uint32_t remote_sge = 1;        // the next entry of it to fill (0 came in ConnData)
    bool swap_sgl = false;          // the peer's byte order is not ours
    // Receiving.
    uint16_t rseq_no = 0, rseq_comp = 0;
    uint32_t rbuf_offset = 0, rbuf_avail = 0, rbuf_free_offset = 0;
    std::vector<uint32_t> rmsg;     // lengths of data messages not yet read (a ring of rq_size + 1)
    uint32_t rmsg_head = 0, rmsg_tail = 0;
};

// ---- rsocket.cpp ----
Socket* find(int fd);   // nullptr: not an rsocket

// ---- rsocket_io.cpp ----
// Completions taken and acted on; credits given when due. How many completions.
int poll_cq(Socket& s);
void give_credits(Socket& s);
// Arms the CQ and sleeps until a completion event (after polling once more). 0, or -1.
int wait_cq(Socket& s);
bool can_send(const Socket& s);
bool rmsg_empty(const Socket& s);
// The control message `ctrl` (a zero-length WRITE with immediate), a control slot taken.
int send_ctrl(Socket& s, uint32_t ctrl);
inline bool nonblocking(const Socket& s, int flags) { return (s.fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT); }

}  // namespace vfab::rdmacm::rs
