#include "vfab/dma/dma_memory.hpp"

#include "vfab/log.hpp"
#include "vfab/vfio/iommu.hpp"
#include "vfab/vfio/pci_sysfs.hpp"

#include <linux/memfd.h>
#include <numa.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

namespace vfab::dma {
namespace {

std::string size_name(size_t page) {
    return page >= (1u << 30) ? str_cat(page >> 30, " GiB") : page >= (1u << 20) ? str_cat(page >> 20, " MiB")
                                                                                 : str_cat(page >> 10, " KiB");
}

Error memlock_error(size_t len) {
    return Error{ENOMEM, str_cat("cannot lock ", len, " bytes of DMA memory: RLIMIT_MEMLOCK is ",
                                 vfio::memlock_limit_text(), " — ", vfio::kRaiseMemlock)};
}

Error no_hugepages(size_t page, size_t len, int node) {
    std::string where = node >= 0 ? str_cat(" on NUMA node ", node) : std::string();
    std::string sysfs = node >= 0 ? str_cat("/sys/devices/system/node/node", node, "/hugepages/hugepages-",
                                            page >> 10, "kB/nr_hugepages")
                                  : str_cat("/sys/kernel/mm/hugepages/hugepages-", page >> 10, "kB/nr_hugepages");
    size_t pages = (len + page - 1) / page;
    return Error{ENOMEM, str_cat("not enough free ", size_name(page), " hugepages", where, " for ", len,
                                 " bytes of DMA memory (", pages, " needed) — reserve them: `vfio-devctl hugepages "
                                 "--reserve ", pages, " --size ", page >= (1u << 30) ? "1G" : "2M",
                                 node >= 0 ? str_cat(" --node ", node) : std::string(), "` or `echo N > ", sysfs, "`")};
}

// One attempt with one page size; errors leave nothing behind.
Result<void> try_allocate(size_t len, size_t page, int node, uint8_t*& base, int& fd) {
    unsigned flags = MFD_CLOEXEC;
    if (page == (2u << 20)) flags |= MFD_HUGETLB | MFD_HUGE_2MB;
    if (page == (1u << 30)) flags |= MFD_HUGETLB | MFD_HUGE_1GB;
    fd = memfd_create("vfab-dma", flags);
    if (fd < 0 && page > 4096 && (errno == ENODEV || errno == EINVAL))
        return Error{ENODEV, str_cat("this kernel has no ", size_name(page), " hugepages pool (no /sys/kernel/mm/"
                                     "hugepages/hugepages-", page >> 10, "kB) — boot with hugepagesz=",
                                     page >= (1u << 30) ? "1G" : "2M", " hugepages=N, or use 2 MiB pages")};
    if (fd < 0) return Error::from_errno(errno, str_cat("memfd_create for ", size_name(page), " pages"));
    auto fail = [&](Error e) -> Result<void> {
        if (base) ::munmap(base, len);
        ::close(fd);
        base = nullptr;
        fd = -1;
        return e;
    };
    if (ftruncate(fd, static_cast<off_t>(len)) < 0) return fail(Error::from_errno(errno, "ftruncate of the DMA memfd"));
    // Shared hugetlb mappings reserve their pages here: ENOMEM means too few are free.
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        return fail(page > 4096 && err == ENOMEM ? no_hugepages(page, len, node)
                                                 : Error::from_errno(err, "mmap of the DMA memfd"));
    }
    base = static_cast<uint8_t*>(p);
    // Place the pages before touching them: the first touch allocates.
    if (node >= 0 && numa_available() >= 0 && node <= numa_max_node()) numa_tonode_memory(base, len, node);
    if (::mlock(base, len) < 0)   // faults every page in (zeroed by the kernel) and pins it
        return fail(errno == ENOMEM || errno == EAGAIN || errno == EPERM ? memlock_error(len)
                                                                          : Error::from_errno(errno, "mlock"));
    return {};
}

}  // namespace

DmaMemoryOptions near_device(const PciAddress& addr, PageSize page_size) {
    auto node = vfio::PciSysfs().numa_node(addr);
    return DmaMemoryOptions{page_size, node ? *node : -1};
}

Result<DmaMemory> DmaMemory::allocate(size_t len, const DmaMemoryOptions& opts) {
    if (len == 0) return Error{EINVAL, "DMA memory: the length must not be 0"};
    DmaMemory m;
    m.node_ = opts.numa_node;
    size_t want = opts.page_size == PageSize::automatic ? (2u << 20) : static_cast<size_t>(opts.page_size);
    for (size_t page : {want, size_t{4096}}) {
        size_t rounded = (len + page - 1) / page * page;
        auto r = try_allocate(rounded, page, opts.numa_node, m.base_, m.fd_);
        if (r) {
            m.len_ = rounded;
            m.page_ = page;
            return m;
        }
        if (page == 4096 || opts.page_size != PageSize::automatic) return r.take_error();
        log(LogLevel::warning, str_cat(r.error().message, " — using 4 KiB pages (slower: more IOTLB misses)"));
    }
    return Error{ENOMEM, "DMA memory: no page size worked"};
}

DmaMemory::DmaMemory(DmaMemory&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), len_(std::exchange(o.len_, 0)), page_(o.page_),
      fd_(std::exchange(o.fd_, -1)), node_(o.node_) {}

DmaMemory& DmaMemory::operator=(DmaMemory&& o) noexcept {
    if (this != &o) {
        release();
        base_ = std::exchange(o.base_, nullptr);
        len_ = std::exchange(o.len_, 0);
        page_ = o.page_;
        fd_ = std::exchange(o.fd_, -1);
        node_ = o.node_;
    }
    return *this;
}

DmaMemory::~DmaMemory() { release(); }

void DmaMemory::release() {
    if (base_) ::munmap(base_, len_);   // also unlocks
    if (fd_ >= 0) ::close(fd_);
    base_ = nullptr;
    fd_ = -1;
}

}  // namespace vfab::dma
