// The attributes that take a connected queue pair through INIT, RTR and RTS from the messages of
// its connection (IB spec 12.7; as the kernel's ib_cm derives them for rdma_cm): each side's QP
// receives from the PSN it chose itself and sends from the one the other chose, takes the peer's QP number,
// and the READ/atomic depths and retry counts the REQ and REP agreed on.
#pragma once

#include <cstdint>

#include "messages.hpp"
#include "vfab/dma/mr_table.hpp"
#include "vfab/rdma/verbs.hpp"

namespace vfab::cm {

struct QpTransition {
    rdma::QpAttr attr;
    uint32_t mask = 0;   // rdma::QpAttrMask
};

// The side that sent the REQ (active) or answered it with the REP (passive).
enum class Side : uint8_t { active, passive };

// RESET -> INIT: remote WRITEs, and READs and atomics when this side answers any (its
// responder resources: the REQ's for the active side, the REP's for the passive).
QpTransition to_init(const Req& req, const Rep& rep, Side side) noexcept;
// INIT -> RTR: the peer at `peer_ip`, its QP number, this side's own starting PSN, the REQ's path MTU.
QpTransition to_rtr(const Req& req, const Rep& rep, Side side, uint32_t peer_ip) noexcept;
// RTR -> RTS: the starting PSN the peer gave, the ACK timeout (the REQ's for the passive side; from the
// REP's target ACK delay for the active), the REQ's retry count, the RNR retry count the peer gave.
QpTransition to_rts(const Req& req, const Rep& rep, Side side) noexcept;

}  // namespace vfab::cm
