// rxe_mcast_peer: the kernel's rxe (rxe0, GID index 1) in a UD multicast group, written against
// the system's libibverbs — the other end of rdma_rxe_test's multicast test.
//
//   rxe_mcast_peer PORT GROUP COUNT      (GROUP: an IPv4 multicast address, a.b.c.d)
//
// It makes a UD queue pair (Q_Key 0x11111111), attaches it to ::ffff:GROUP, posts receives,
// listens on TCP 127.0.0.1:PORT and, over one connection:
//   writes "ready <qpn>", waits for COUNT datagrams to the group (message k: 200 bytes of
//   (k * 31 + i) & 0xff) and writes "got <n> <good>" (<good>: how many held what they should);
//   on "send": sends COUNT datagrams to the group (message k: 300 bytes of (k * 17 + i + 5)
//   & 0xff), then writes "sent <n>" with the successful send completions; ends at "quit".
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs_peer_util.hpp"

namespace {

constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kRecvs = 64, kSlot = 2048, kGrh = 40;

using vfab::lab::peer::die;
using vfab::lab::peer::read_line;
using vfab::lab::peer::write_str;

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: rxe_mcast_peer PORT GROUP COUNT\n");
        return 2;
    }
    in_addr group_ip{};
    if (::inet_pton(AF_INET, argv[2], &group_ip) != 1) return die("GROUP");
    const uint32_t count = uint32_t(std::atoi(argv[3]));
    ibv_gid group{};
    group.raw[10] = group.raw[11] = 0xff;
    std::memcpy(group.raw + 12, &group_ip.s_addr, 4);

    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ibv_context* ctx = nullptr;
    for (int i = 0; i < n && !ctx; ++i)
        if (std::string(ibv_get_device_name(list[i])) == "rxe0") ctx = ibv_open_device(list[i]);
    if (!ctx) return die("open rxe0");
    auto* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, (kRecvs + 1) * kSlot));
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_mr* mr = pd ? ibv_reg_mr(pd, buf, (kRecvs + 1) * kSlot, IBV_ACCESS_LOCAL_WRITE) : nullptr;
    ibv_cq* cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
    if (!mr || !cq) return die("pd/mr/cq");
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_UD;
    ia.cap = {64, kRecvs, 1, 1, 0};
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    if (!qp) return die("create_qp");
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return die("INIT");
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return die("RTR");
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) return die("RTS");
    if (ibv_attach_mcast(qp, &group, 0)) return die("attach_mcast");
    // The lab kernel's rxe (6.1) programs the IPv6 mapping of the group's MAC (33:33:...) and
    // never joins the IPv4 group, so the kernel would drop the group's datagrams before rxe's
    // UDP socket sees them. Joining the group on rxe's interface, as an application on such a
    // kernel must, fixes both (newer kernels' rxe joins it itself).
    ibv_gid local{};
    if (ibv_query_gid(ctx, 1, 1, &local)) return die("query_gid 1");
    ip_mreq mreq{};
    mreq.imr_multiaddr = group_ip;
    std::memcpy(&mreq.imr_interface.s_addr, local.raw + 12, 4);
    const int igmp = ::socket(AF_INET, SOCK_DGRAM, 0);
    if (igmp < 0 || ::setsockopt(igmp, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq)) return die("IP_ADD_MEMBERSHIP");
    for (uint32_t i = 0; i < kRecvs; ++i) {
        ibv_sge sge{reinterpret_cast<uint64_t>(buf + i * kSlot), kSlot, mr->lkey};
        ibv_recv_wr wr{}, *bad = nullptr;
        wr.wr_id = i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        if (ibv_post_recv(qp, &wr, &bad)) return die("post_recv");
    }

    int ls = ::socket(AF_INET, SOCK_STREAM, 0), one = 1;
    ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(uint16_t(std::atoi(argv[1])));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || ::listen(ls, 1)) return die("listen");
    const int fd = ::accept(ls, nullptr, nullptr);
    ::close(ls);
    write_str(fd, "ready " + std::to_string(qp->qp_num) + "\n");

    // The test's datagrams, in order (UD over one link keeps it), checked byte by byte.
    uint32_t got = 0, good = 0;
    for (int tries = 0; got < count && tries < 600000; ++tries) {
        ibv_wc wc{};
        if (ibv_poll_cq(cq, 1, &wc) != 1) {
            usleep(50);
            continue;
        }
        if (wc.opcode != IBV_WC_RECV) continue;
        bool ok = wc.status == IBV_WC_SUCCESS && wc.byte_len == kGrh + 200;
        const uint8_t* m = buf + wc.wr_id * kSlot + kGrh;
        for (uint32_t i = 0; ok && i < 200; ++i) ok = m[i] == uint8_t(got * 31 + i);
        good += ok;
        ++got;
    }
    write_str(fd, "got " + std::to_string(got) + " " + std::to_string(good) + "\n");

    if (read_line(fd) == "send") {
        ibv_ah_attr ah{};
        ah.is_global = 1;
        ah.grh.dgid = group;
        ah.grh.sgid_index = 1;
        ah.grh.hop_limit = 64;
        ah.port_num = 1;
        ibv_ah* h = ibv_create_ah(pd, &ah);
        if (!h) return die("create_ah");
        uint8_t* out = buf + kRecvs * kSlot;
        uint32_t sent = 0;
        for (uint32_t k = 0; k < count; ++k) {
            for (uint32_t i = 0; i < 300; ++i) out[i] = uint8_t(k * 17 + i + 5);
            ibv_sge sge{reinterpret_cast<uint64_t>(out), 300, mr->lkey};
            ibv_send_wr wr{}, *bad = nullptr;
            wr.wr_id = 1000 + k;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.ud.ah = h;
            wr.wr.ud.remote_qpn = 0xFFFFFF;
            wr.wr.ud.remote_qkey = kQkey;
            if (ibv_post_send(qp, &wr, &bad)) return die("post_send");
            for (int tries = 0; tries < 600000; ++tries) {   // one at a time: `out` is reused
                ibv_wc wc{};
                if (ibv_poll_cq(cq, 1, &wc) != 1) {
                    usleep(50);
                    continue;
                }
                if (wc.wr_id != 1000 + k) continue;   // our own receives, if any
                sent += wc.status == IBV_WC_SUCCESS;
                break;
            }
            usleep(2000);   // a gentle pace: the test's receives are reposted as it polls
        }
        write_str(fd, "sent " + std::to_string(sent) + "\n");
        (void)read_line(fd);   // quit
        ibv_destroy_ah(h);
    }
    ::close(fd);
    ::close(igmp);
    ibv_detach_mcast(qp, &group, 0);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    std::free(buf);
    return 0;
}
