// The connection ledger (ledger.hpp).
#include "ledger.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>

namespace vfab::cm {

namespace {
constexpr uint32_t kMagic = 0x4D43'4656;   // "VFCM"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kLive = 1;
}  // namespace

struct Ledger::Header {
    uint32_t magic, version, slots;
    uint32_t used;   // slots [0, used) may hold records; raised before a slot is written
};

struct Ledger::Slot {
    uint32_t live;   // kLive, written last (release) and cleared first
    uint32_t local_comm_id, remote_comm_id, peer_ip, remote_qpn, reserved;
};

Ledger::Header& Ledger::header() const noexcept { return *static_cast<Header*>(map_); }

Ledger::Slot* Ledger::slots() const noexcept {
    return reinterpret_cast<Slot*>(static_cast<char*>(map_) + sizeof(Header));
}

Result<std::unique_ptr<Ledger>> Ledger::open(const std::string& path, std::vector<Entry>& left) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Error::from_errno(errno, str_cat("CM ledger ", path));
    const size_t size = sizeof(Header) + size_t(kSlots) * sizeof(Slot);
    auto fail = [&](const char* what) -> Error {
        const int e = errno;
        ::close(fd);
        return Error::from_errno(e, str_cat("CM ledger ", path, ": ", what));
    };
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return fail("another process has it");
    struct stat st {};
    if (::fstat(fd, &st) != 0) return fail("fstat");
    if (size_t(st.st_size) != size && ::ftruncate(fd, 0) != 0) return fail("ftruncate");   // another layout: start again
    if (::ftruncate(fd, off_t(size)) != 0) return fail("ftruncate");   // sparse: only written pages take room
    void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return fail("mmap");
    std::unique_ptr<Ledger> l(new Ledger(fd, map, size));
    Header& h = l->header();
    const bool ours = h.magic == kMagic && h.version == kVersion && h.slots == kSlots;
    for (uint32_t i = 0; ours && i < std::min(h.used, kSlots); ++i) {
        Slot& s = l->slots()[i];
        if (std::atomic_ref(s.live).load(std::memory_order_acquire) != kLive) continue;
        left.push_back({s.local_comm_id, s.remote_comm_id, s.peer_ip, s.remote_qpn});
        std::atomic_ref(s.live).store(0, std::memory_order_release);
    }
    h = {kMagic, kVersion, kSlots, 0};
    return l;
}

Ledger::~Ledger() {
    ::munmap(map_, size_);
    ::close(fd_);   // the lock goes with it
}

void Ledger::add(const Entry& e) noexcept {
    uint32_t i;
    if (!free_.empty()) {
        i = free_.back();
        free_.pop_back();
    } else if (used_ < kSlots) {
        i = used_++;
        std::atomic_ref(header().used).store(used_, std::memory_order_release);
    } else {
        return;
    }
    Slot& s = slots()[i];
    s.local_comm_id = e.local_comm_id;
    s.remote_comm_id = e.remote_comm_id;
    s.peer_ip = e.peer_ip;
    s.remote_qpn = e.remote_qpn;
    std::atomic_ref(s.live).store(kLive, std::memory_order_release);
    slot_of_[e.local_comm_id] = i;
}

void Ledger::remove(uint32_t local_comm_id) noexcept {
    auto it = slot_of_.find(local_comm_id);
    if (it == slot_of_.end()) return;
    std::atomic_ref(slots()[it->second].live).store(0, std::memory_order_release);
    free_.push_back(it->second);
    slot_of_.erase(it);
}

std::string ledger_dir() {
    auto usable = [](const std::string& d) {
        if (d.empty()) return false;
        for (size_t at = 1; (at = d.find('/', at)) != std::string::npos; ++at) (void)::mkdir(d.substr(0, at).c_str(), 0755);
        (void)::mkdir(d.c_str(), 0700);
        return ::access(d.c_str(), W_OK | X_OK) == 0;
    };
    if (const char* e = std::getenv("VFAB_CM_STATE_DIR")) return usable(e) ? e : "";
    if (usable("/run/vfab/cm")) return "/run/vfab/cm";
    if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && usable(std::string(x) + "/vfab/cm")) return std::string(x) + "/vfab/cm";
    return "";
}

}  // namespace vfab::cm
