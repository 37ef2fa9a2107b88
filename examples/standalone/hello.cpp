// vfab-hello: the smallest program a user writes against an installed vfab (see README.md here):
// open a NIC bound to vfio-pci through the multiplexed API, send one broadcast frame from
// registered memory and wait for its completion.
//
//   vfab-hello 0000:00:02.0
#include <vfab/log.hpp>
#include <vfab/vfab.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s PCI-ADDRESS   (a NIC bound to vfio-pci)\n", argv[0]);
        return 2;
    }
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);
    auto dev = vfab::Device::open(argv[1]);
    if (!dev) {
        std::fprintf(stderr, "%s: %s\n", argv[0], dev.error().message.c_str());
        return 1;
    }
    const vfab::DeviceAttr& a = (*dev)->attr();
    std::printf("%s: %s (provider %s), link %s\n", argv[1], a.name.c_str(), a.provider.c_str(),
                (*dev)->link().up ? "up" : "down");

    auto cq = (*dev)->create_cq(64);
    if (!cq) return std::fprintf(stderr, "%s: %s\n", argv[0], cq.error().message.c_str()), 1;
    auto qp = (*dev)->create_qp({.send_cq = *cq, .recv_cq = *cq, .caps = {.max_send_wr = 16, .max_recv_wr = 16}});
    if (!qp) return std::fprintf(stderr, "%s: %s\n", argv[0], qp.error().message.c_str()), 1;

    static unsigned char frame[64];
    std::memset(frame, 0xff, 6);                                     // broadcast
    std::memcpy(frame + 6, a.mac, 6);
    frame[12] = 0x88, frame[13] = 0xb5;                              // local experimental EtherType
    std::memcpy(frame + 14, "hello from an installed vfab", 28);
    auto mr = (*dev)->pd().register_memory(frame, sizeof frame, vfab::dma::Access::local_write);
    if (!mr) return std::fprintf(stderr, "%s: %s\n", argv[0], mr.error().message.c_str()), 1;

    const vfab::Sge sge{reinterpret_cast<uintptr_t>(frame), 60, mr->lkey};
    const vfab::SendWr wr{.wr_id = 1, .sg_list = &sge, .num_sge = 1, .flags = vfab::send_signaled};
    if (auto r = (*qp)->post_send({&wr, 1}); r.error)
        return std::fprintf(stderr, "%s: post_send: %s\n", argv[0], std::strerror(r.error)), 1;
    vfab::Completion wc[4];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < deadline) {
        const int n = (*cq)->poll(wc);
        if (n < 0) return std::fprintf(stderr, "%s: poll: %s\n", argv[0], std::strerror(-n)), 1;
        if (n > 0) {
            std::printf("sent one frame: %s\n", vfab::to_string(wc[0].status));
            return wc[0].status == vfab::WcStatus::success ? 0 : 1;
        }
    }
    std::fprintf(stderr, "%s: the send did not complete within 2 s\n", argv[0]);
    return 1;
}
