// CM messages in and out of MADs (see messages.hpp; the fields: mad.hpp).
#include "messages.hpp"

#include <concepts>
#include <cstring>
#include <type_traits>

namespace vfab::cm {

namespace {

// Each message's fields are listed once (fields() below) and walked by one of these: Writer
// puts the values into a MAD's data, Reader takes them out.
struct Writer {
    uint8_t* d;
    template <class T>
    void operator()(Field f, const T& v) const noexcept { set(d, f, uint64_t(v)); }
    template <size_t N>
    void operator()(size_t at, const std::array<uint8_t, N>& a) const noexcept { std::memcpy(d + at, a.data(), N); }
    void constant(Field f, uint64_t v) const noexcept { set(d, f, v); }
};
struct Reader {
    const uint8_t* d;
    template <class T>
    void operator()(Field f, T& v) const noexcept { v = T(get(d, f)); }
    template <size_t N>
    void operator()(size_t at, std::array<uint8_t, N>& a) const noexcept { std::memcpy(a.data(), d + at, N); }
    void constant(Field, uint64_t) const noexcept {}
};

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, Req>
void fields(const Io& io, M& m) noexcept {
    io(req::local_comm_id, m.local_comm_id);
    io(req::service_id, m.service_id);
    io(req::local_ca_guid, m.local_ca_guid);
    io(req::local_qkey, m.local_qkey);
    io(req::local_qpn, m.local_qpn);
    io(req::responder_resources, m.responder_resources);
    io(req::initiator_depth, m.initiator_depth);
    io(req::remote_cm_response_timeout, m.remote_cm_response_timeout);
    io(req::transport_service_type, m.transport_type);
    io(req::end_to_end_flow_control, m.flow_control);
    io(req::starting_psn, m.starting_psn);
    io(req::local_cm_response_timeout, m.local_cm_response_timeout);
    io(req::retry_count, m.retry_count);
    io(req::pkey, m.pkey);
    io(req::path_mtu, m.path_mtu);
    io(req::rnr_retry_count, m.rnr_retry_count);
    io(req::max_cm_retries, m.max_cm_retries);
    io(req::srq, m.srq);
    io(req::extended_transport_type, m.extended_transport_type);
    // RoCE: permissive LIDs, not subnet-local (the kernel's own REQs over rxe), no alternate path.
    io.constant(req::primary_local_lid, 0xFFFF);
    io.constant(req::primary_remote_lid, 0xFFFF);
    io(req::primary_local_gid, m.local_gid);
    io(req::primary_remote_gid, m.remote_gid);
    io(req::primary_flow_label, m.flow_label);
    io(req::primary_packet_rate, m.packet_rate);
    io(req::primary_traffic_class, m.traffic_class);
    io(req::primary_hop_limit, m.hop_limit);
    io(req::primary_sl, m.sl);
    io(req::primary_local_ack_timeout, m.local_ack_timeout);
    io(req::private_data, m.private_data);
}

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, Rep>
void fields(const Io& io, M& m) noexcept {
    io(rep::local_comm_id, m.local_comm_id);
    io(rep::remote_comm_id, m.remote_comm_id);
    io(rep::local_qkey, m.local_qkey);
    io(rep::local_qpn, m.local_qpn);
    io(rep::starting_psn, m.starting_psn);
    io(rep::responder_resources, m.responder_resources);
    io(rep::initiator_depth, m.initiator_depth);
    io(rep::target_ack_delay, m.target_ack_delay);
    io(rep::failover_accepted, m.failover_accepted);
    io(rep::end_to_end_flow_control, m.flow_control);
    io(rep::rnr_retry_count, m.rnr_retry_count);
    io(rep::srq, m.srq);
    io(rep::local_ca_guid, m.local_ca_guid);
    io(rep::private_data, m.private_data);
}

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, Rtu>
void fields(const Io& io, M& m) noexcept {
    io(rtu::local_comm_id, m.local_comm_id);
    io(rtu::remote_comm_id, m.remote_comm_id);
    io(rtu::private_data, m.private_data);
}

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, Rej>
void fields(const Io& io, M& m) noexcept {
    io(rej::local_comm_id, m.local_comm_id);
    io(rej::remote_comm_id, m.remote_comm_id);
    io(rej::message_rejected, m.message_rejected);
    io(rej::ari_length, m.ari_length);
    io(rej::reason, m.reason);
    io(rej::ari, m.ari);
    io(rej::private_data, m.private_data);
}

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, Mra>
void fields(const Io& io, M& m) noexcept {
    io(mra::local_comm_id, m.local_comm_id);
    io(mra::remote_comm_id, m.remote_comm_id);
    io(mra::message_mraed, m.message_mraed);
    io(mra::service_timeout, m.service_timeout);
    io(mra::private_data, m.private_data);
}

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, Dreq>
void fields(const Io& io, M& m) noexcept {
    io(dreq::local_comm_id, m.local_comm_id);
    io(dreq::remote_comm_id, m.remote_comm_id);
    io(dreq::remote_qpn, m.remote_qpn);
    io(dreq::private_data, m.private_data);
}

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, Drep>
void fields(const Io& io, M& m) noexcept {
    io(drep::local_comm_id, m.local_comm_id);
    io(drep::remote_comm_id, m.remote_comm_id);
    io(drep::private_data, m.private_data);
}

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, SidrReq>
void fields(const Io& io, M& m) noexcept {
    io(sidr_req::request_id, m.request_id);
    io(sidr_req::pkey, m.pkey);
    io(sidr_req::service_id, m.service_id);
    io(sidr_req::private_data, m.private_data);
}

template <class Io, class M>
    requires std::same_as<std::remove_const_t<M>, SidrRep>
void fields(const Io& io, M& m) noexcept {
    io(sidr_rep::request_id, m.request_id);
    io(sidr_rep::status, m.status);
    io(sidr_rep::qpn, m.qpn);
    io(sidr_rep::service_id, m.service_id);
    io(sidr_rep::qkey, m.qkey);
    io(sidr_rep::private_data, m.private_data);
}

// The attribute of each message type (the variant's order).
constexpr Attr kAttrOf[] = {Attr::req, Attr::rep,  Attr::rtu,      Attr::rej,     Attr::mra,
                            Attr::dreq, Attr::drep, Attr::sidr_req, Attr::sidr_rep};
static_assert(std::size(kAttrOf) == std::variant_size_v<Message>);

template <class T>
bool take(Attr attr, Attr want, const uint8_t* d, Message& out) noexcept {
    if (attr != want) return false;
    T m;
    fields(Reader{d}, m);
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
    std::visit([&](const auto& x) { fields(Writer{mad + kMadHeader}, x); }, m);
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
