// Registers a large malloc'ed buffer (default 1 GiB) through a real IOMMU and reports the
// time taken and the IOMMU mappings it used. Run in the lab:
//   scripts/lab run build/release/bench/mr_register_big[:SIZE_MIB [BACKEND]]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/log.hpp"

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    using namespace vfab;
    size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
    vfio::DeviceOptions o;
    if (argc > 2) {
        auto b = vfio::parse_iommu_backend(argv[2]);
        if (!b) return std::fprintf(stderr, "%s\n", b.error().message.c_str()), 2;
        o.backend = *b;
    }
    const char* bdf = std::getenv("VFAB_BENCH_DEVICE") ? std::getenv("VFAB_BENCH_DEVICE") : "0000:00:01.0";
    auto dev = vfio::Device::open(*PciAddress::parse(bdf), o);
    if (!dev) return std::fprintf(stderr, "%s\n", dev.error().message.c_str()), 1;
    auto pd = dma::ProtectionDomain::create((*dev)->iommu_shared());
    if (!pd) return std::fprintf(stderr, "%s\n", pd.error().message.c_str()), 1;

    size_t len = mib << 20;
    auto* buf = static_cast<uint8_t*>(std::malloc(len));
    if (!buf) return std::fprintf(stderr, "malloc(%zu) failed\n", len), 1;
    std::memset(buf, 1, len);   // fault it in first: time the registration, not page faults
    size_t before = (*dev)->iommu().mappings().size();
    auto t0 = std::chrono::steady_clock::now();
    auto mr = (*pd)->register_memory(buf, len, dma::Access::local_write);
    auto t1 = std::chrono::steady_clock::now();
    if (!mr) return std::fprintf(stderr, "%s\n", mr.error().message.c_str()), 1;
    size_t used = (*dev)->iommu().mappings().size() - before;
    auto t2 = std::chrono::steady_clock::now();
    (void)(*pd)->deregister(*mr);
    auto t3 = std::chrono::steady_clock::now();
    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::printf("register %zu MiB of malloc'ed memory (%s backend): %.1f ms, %zu IOMMU mapping(s); "
                "deregister: %.1f ms\n", mib, vfio::to_string((*dev)->iommu().backend()), ms(t0, t1), used, ms(t2, t3));
    std::free(buf);
    return 0;
}
