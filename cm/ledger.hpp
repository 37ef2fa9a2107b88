// A port's established connections, kept in a file that outlives the process (docs/cm.md, "A
// killed program"). A vfab process killed with connections open sends no DREQ: nothing of it is
// left to send one, and a kernel peer that only waits to receive keeps its connection and QP for
// ever. The next process to open the port finds the connections in the ledger and disconnects
// them (the Manager sends each a DREQ), so the peer sees the disconnect.
//
// The file is named after the port (its node GUID) in a directory of the user's choosing; it is
// a header and a table of fixed slots, mapped shared: a record written is in the file the
// moment it is written, whatever happens to the process after. A record is made live last; the
// header counts the slots ever used (the next process reads no further), so the file takes
// room for as many connections as were open at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "vfab/result.hpp"

namespace vfab::cm {

class Ledger {
public:
    struct Entry {
        uint32_t local_comm_id = 0;
        uint32_t remote_comm_id = 0;
        uint32_t peer_ip = 0;       // host order
        uint32_t remote_qpn = 0;
    };
    static constexpr uint32_t kSlots = 65536;   // connections of one port at once (max_qp at most)

    // Opens `path` (made if missing) for this process alone (EWOULDBLOCK: another process has
    // it). The entries an earlier process left are moved to `left` and cleared from the file.
    static Result<std::unique_ptr<Ledger>> open(const std::string& path, std::vector<Entry>& left);
    ~Ledger();
    Ledger(const Ledger&) = delete;
    Ledger& operator=(const Ledger&) = delete;

    void add(const Entry& e) noexcept;             // no room: not kept (a peer learns it by timeout)
    void remove(uint32_t local_comm_id) noexcept;

private:
    struct Slot;
    struct Header;
    Ledger(int fd, void* map, size_t size) : fd_(fd), map_(map), size_(size) {}
    Header& header() const noexcept;
    Slot* slots() const noexcept;
    int fd_;
    void* map_;
    size_t size_;
    uint32_t used_ = 0;                                // slots handed out so far
    std::vector<uint32_t> free_;                       // below used_, free again
    std::unordered_map<uint32_t, uint32_t> slot_of_;   // local comm ID -> slot
};

// Where the ledgers live: $VFAB_CM_STATE_DIR, else /run/vfab/cm, else $XDG_RUNTIME_DIR/vfab/cm;
// made if missing. Empty when none can be made (no ledger is kept).
std::string ledger_dir();

}  // namespace vfab::cm
