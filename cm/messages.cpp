// CM messages in and out of MADs (see messages.hpp; the fields: mad.hpp).
#include "messages.hpp"

#include <cstring>

namespace vfab::cm {

namespace {

template <size_t N>
void put_bytes(uint8_t* d, size_t at, const std::array<uint8_t, N>& a) noexcept {
    std::memcpy(d + at, a.data(), N);
}
template <size_t N>
void take_bytes(const uint8_t* d, size_t at, std::array<uint8_t, N>& a) noexcept {
    std::memcpy(a.data(), d + at, N);
}

void encode_body(const Req& m, uint8_t* d) noexcept {
    set(d, req::local_comm_id, m.local_comm_id);
    set(d, req::service_id, m.service_id);
    set(d, req::local_ca_guid, m.local_ca_guid);
    set(d, req::local_qkey, m.local_qkey);
    set(d, req::local_qpn, m.local_qpn);
    set(d, req::responder_resources, m.responder_resources);
    set(d, req::initiator_depth, m.initiator_depth);
    set(d, req::remote_cm_response_timeout, m.remote_cm_response_timeout);
    set(d, req::transport_service_type, m.transport_type);
    set(d, req::end_to_end_flow_control, m.flow_control);
    set(d, req::starting_psn, m.starting_psn);
    set(d, req::local_cm_response_timeout, m.local_cm_response_timeout);
    set(d, req::retry_count, m.retry_count);
    set(d, req::pkey, m.pkey);
    set(d, req::path_mtu, m.path_mtu);
    set(d, req::rnr_retry_count, m.rnr_retry_count);
    set(d, req::max_cm_retries, m.max_cm_retries);
    set(d, req::srq, m.srq);
    set(d, req::extended_transport_type, m.extended_transport_type);
    // RoCE: permissive LIDs, not subnet-local (the kernel's own REQs over rxe), no alternate path.
    set(d, req::primary_local_lid, 0xFFFF);
    set(d, req::primary_remote_lid, 0xFFFF);
    put_bytes(d, req::primary_local_gid, m.local_gid);
    put_bytes(d, req::primary_remote_gid, m.remote_gid);
    set(d, req::primary_flow_label, m.flow_label);
    set(d, req::primary_packet_rate, m.packet_rate);
    set(d, req::primary_traffic_class, m.traffic_class);
    set(d, req::primary_hop_limit, m.hop_limit);
    set(d, req::primary_sl, m.sl);
    set(d, req::primary_local_ack_timeout, m.local_ack_timeout);
    put_bytes(d, req::private_data, m.private_data);
}

void decode_body(const uint8_t* d, Req& m) noexcept {
    m.local_comm_id = uint32_t(get(d, req::local_comm_id));
    m.service_id = get(d, req::service_id);
    m.local_ca_guid = get(d, req::local_ca_guid);
    m.local_qkey = uint32_t(get(d, req::local_qkey));
    m.local_qpn = uint32_t(get(d, req::local_qpn));
    m.responder_resources = uint8_t(get(d, req::responder_resources));
    m.initiator_depth = uint8_t(get(d, req::initiator_depth));
    m.remote_cm_response_timeout = uint8_t(get(d, req::remote_cm_response_timeout));
    m.transport_type = uint8_t(get(d, req::transport_service_type));
    m.flow_control = get(d, req::end_to_end_flow_control);
    m.starting_psn = uint32_t(get(d, req::starting_psn));
    m.local_cm_response_timeout = uint8_t(get(d, req::local_cm_response_timeout));
    m.retry_count = uint8_t(get(d, req::retry_count));
    m.pkey = uint16_t(get(d, req::pkey));
    m.path_mtu = uint8_t(get(d, req::path_mtu));
    m.rnr_retry_count = uint8_t(get(d, req::rnr_retry_count));
    m.max_cm_retries = uint8_t(get(d, req::max_cm_retries));
    m.srq = get(d, req::srq);
    m.extended_transport_type = uint8_t(get(d, req::extended_transport_type));
    take_bytes(d, req::primary_local_gid, m.local_gid);
    take_bytes(d, req::primary_remote_gid, m.remote_gid);
    m.flow_label = uint32_t(get(d, req::primary_flow_label));
    m.packet_rate = uint8_t(get(d, req::primary_packet_rate));
    m.traffic_class = uint8_t(get(d, req::primary_traffic_class));
    m.hop_limit = uint8_t(get(d, req::primary_hop_limit));
    m.sl = uint8_t(get(d, req::primary_sl));
    m.local_ack_timeout = uint8_t(get(d, req::primary_local_ack_timeout));
    take_bytes(d, req::private_data, m.private_data);
}

void encode_body(const Rep& m, uint8_t* d) noexcept {
    set(d, rep::local_comm_id, m.local_comm_id);
    set(d, rep::remote_comm_id, m.remote_comm_id);
    set(d, rep::local_qkey, m.local_qkey);
    set(d, rep::local_qpn, m.local_qpn);
    set(d, rep::starting_psn, m.starting_psn);
    set(d, rep::responder_resources, m.responder_resources);
    set(d, rep::initiator_depth, m.initiator_depth);
    set(d, rep::target_ack_delay, m.target_ack_delay);
    set(d, rep::failover_accepted, m.failover_accepted);
    set(d, rep::end_to_end_flow_control, m.flow_control);
    set(d, rep::rnr_retry_count, m.rnr_retry_count);
    set(d, rep::srq, m.srq);
    set(d, rep::local_ca_guid, m.local_ca_guid);
    put_bytes(d, rep::private_data, m.private_data);
}

void decode_body(const uint8_t* d, Rep& m) noexcept {
    m.local_comm_id = uint32_t(get(d, rep::local_comm_id));
    m.remote_comm_id = uint32_t(get(d, rep::remote_comm_id));
    m.local_qkey = uint32_t(get(d, rep::local_qkey));
    m.local_qpn = uint32_t(get(d, rep::local_qpn));
    m.starting_psn = uint32_t(get(d, rep::starting_psn));
    m.responder_resources = uint8_t(get(d, rep::responder_resources));
    m.initiator_depth = uint8_t(get(d, rep::initiator_depth));
    m.target_ack_delay = uint8_t(get(d, rep::target_ack_delay));
    m.failover_accepted = uint8_t(get(d, rep::failover_accepted));
    m.flow_control = get(d, rep::end_to_end_flow_control);
    m.rnr_retry_count = uint8_t(get(d, rep::rnr_retry_count));
    m.srq = get(d, rep::srq);
    m.local_ca_guid = get(d, rep::local_ca_guid);
    take_bytes(d, rep::private_data, m.private_data);
}

void encode_body(const Rtu& m, uint8_t* d) noexcept {
    set(d, rtu::local_comm_id, m.local_comm_id);
    set(d, rtu::remote_comm_id, m.remote_comm_id);
    put_bytes(d, rtu::private_data, m.private_data);
}

void decode_body(const uint8_t* d, Rtu& m) noexcept {
    m.local_comm_id = uint32_t(get(d, rtu::local_comm_id));
    m.remote_comm_id = uint32_t(get(d, rtu::remote_comm_id));
    take_bytes(d, rtu::private_data, m.private_data);
}

void encode_body(const Rej& m, uint8_t* d) noexcept {
    set(d, rej::local_comm_id, m.local_comm_id);
    set(d, rej::remote_comm_id, m.remote_comm_id);
    set(d, rej::message_rejected, m.message_rejected);
    set(d, rej::ari_length, m.ari_length);
    set(d, rej::reason, m.reason);
    put_bytes(d, rej::ari, m.ari);
    put_bytes(d, rej::private_data, m.private_data);
}

void decode_body(const uint8_t* d, Rej& m) noexcept {
    m.local_comm_id = uint32_t(get(d, rej::local_comm_id));
    m.remote_comm_id = uint32_t(get(d, rej::remote_comm_id));
    m.message_rejected = uint8_t(get(d, rej::message_rejected));
    m.ari_length = uint8_t(get(d, rej::ari_length));
    m.reason = uint16_t(get(d, rej::reason));
    take_bytes(d, rej::ari, m.ari);
    take_bytes(d, rej::private_data, m.private_data);
}

void encode_body(const Mra& m, uint8_t* d) noexcept {
    set(d, mra::local_comm_id, m.local_comm_id);
    set(d, mra::remote_comm_id, m.remote_comm_id);
    set(d, mra::message_mraed, m.message_mraed);
    set(d, mra::service_timeout, m.service_timeout);
    put_bytes(d, mra::private_data, m.private_data);
}

void decode_body(const uint8_t* d, Mra& m) noexcept {
    m.local_comm_id = uint32_t(get(d, mra::local_comm_id));
    m.remote_comm_id = uint32_t(get(d, mra::remote_comm_id));
    m.message_mraed = uint8_t(get(d, mra::message_mraed));
    m.service_timeout = uint8_t(get(d, mra::service_timeout));
    take_bytes(d, mra::private_data, m.private_data);
}

void encode_body(const Dreq& m, uint8_t* d) noexcept {
    set(d, dreq::local_comm_id, m.local_comm_id);
    set(d, dreq::remote_comm_id, m.remote_comm_id);
    set(d, dreq::remote_qpn, m.remote_qpn);
    put_bytes(d, dreq::private_data, m.private_data);
}

void decode_body(const uint8_t* d, Dreq& m) noexcept {
    m.local_comm_id = uint32_t(get(d, dreq::local_comm_id));
    m.remote_comm_id = uint32_t(get(d, dreq::remote_comm_id));
    m.remote_qpn = uint32_t(get(d, dreq::remote_qpn));
    take_bytes(d, dreq::private_data, m.private_data);
}

void encode_body(const Drep& m, uint8_t* d) noexcept {
    set(d, drep::local_comm_id, m.local_comm_id);
    set(d, drep::remote_comm_id, m.remote_comm_id);
    put_bytes(d, drep::private_data, m.private_data);
}

void decode_body(const uint8_t* d, Drep& m) noexcept {
    m.local_comm_id = uint32_t(get(d, drep::local_comm_id));
    m.remote_comm_id = uint32_t(get(d, drep::remote_comm_id));
    take_bytes(d, drep::private_data, m.private_data);
}

void encode_body(const SidrReq& m, uint8_t* d) noexcept {
    set(d, sidr_req::request_id, m.request_id);
    set(d, sidr_req::pkey, m.pkey);
    set(d, sidr_req::service_id, m.service_id);
    put_bytes(d, sidr_req::private_data, m.private_data);
}

void decode_body(const uint8_t* d, SidrReq& m) noexcept {
    m.request_id = uint32_t(get(d, sidr_req::request_id));
    m.pkey = uint16_t(get(d, sidr_req::pkey));
    m.service_id = get(d, sidr_req::service_id);
    take_bytes(d, sidr_req::private_data, m.private_data);
}

void encode_body(const SidrRep& m, uint8_t* d) noexcept {
    set(d, sidr_rep::request_id, m.request_id);
    set(d, sidr_rep::status, m.status);
    set(d, sidr_rep::qpn, m.qpn);
    set(d, sidr_rep::service_id, m.service_id);
    set(d, sidr_rep::qkey, m.qkey);
    put_bytes(d, sidr_rep::private_data, m.private_data);
}

void decode_body(const uint8_t* d, SidrRep& m) noexcept {
    m.request_id = uint32_t(get(d, sidr_rep::request_id));
    m.status = uint8_t(get(d, sidr_rep::status));
    m.qpn = uint32_t(get(d, sidr_rep::qpn));
    m.service_id = get(d, sidr_rep::service_id);
    m.qkey = uint32_t(get(d, sidr_rep::qkey));
    take_bytes(d, sidr_rep::private_data, m.private_data);
}

// The attribute of each message type (the variant's order).
constexpr Attr kAttrOf[] = {Attr::req, Attr::rep,  Attr::rtu,      Attr::rej,     Attr::mra,
                            Attr::dreq, Attr::drep, Attr::sidr_req, Attr::sidr_rep};
static_assert(std::size(kAttrOf) == std::variant_size_v<Message>);

template <class T>
bool take(Attr attr, Attr want, const uint8_t* d, Message& out) noexcept {
    if (attr != want) return false;
    T m;
    decode_body(d, m);
    out = m;
    return true;
}

}  // namespace

void encode(const Message& m, uint64_t tid, uint8_t* mad) noexcept {
    std::memset(mad, 0, kMadSize);
    set(mad, mad::base_version, kBaseVersion);
    set(mad, mad::mgmt_class, kClassCm);
    set(mad, mad::class_version, kCmClassVersion);
    set(mad, mad::method, kMethodSend);
    set(mad, mad::tid, tid);
    set(mad, mad::attr_id, uint16_t(kAttrOf[m.index()]));
    std::visit([&](const auto& x) { encode_body(x, mad + kMadHeader); }, m);
}

DecodeResult decode(const uint8_t* mad, size_t len, Message& out, uint64_t& tid) noexcept {
    if (len < kMadSize) return DecodeResult::short_mad;
    if (get(mad, mad::base_version) != kBaseVersion || get(mad, mad::mgmt_class) != kClassCm ||
        get(mad, mad::class_version) != kCmClassVersion)
        return DecodeResult::not_cm;
    if (get(mad, mad::method) != kMethodSend) return DecodeResult::bad_method;
    tid = get(mad, mad::tid);
    const auto attr = Attr(get(mad, mad::attr_id));
    const uint8_t* d = mad + kMadHeader;
    if (take<Req>(attr, Attr::req, d, out) || take<Rep>(attr, Attr::rep, d, out) || take<Rtu>(attr, Attr::rtu, d, out) ||
        take<Rej>(attr, Attr::rej, d, out) || take<Mra>(attr, Attr::mra, d, out) || take<Dreq>(attr, Attr::dreq, d, out) ||
        take<Drep>(attr, Attr::drep, d, out) || take<SidrReq>(attr, Attr::sidr_req, d, out) ||
        take<SidrRep>(attr, Attr::sidr_rep, d, out))
        return DecodeResult::ok;
    return DecodeResult::unknown_attribute;
}

}  // namespace vfab::cm
