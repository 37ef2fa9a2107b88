// Capabilities for lab tests that must see what an unprivileged application sees.
#pragma once

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vfab::lab {

// Drops CAP_IPC_LOCK from this process and from what it may exec (the bounding set: root
// gets its capabilities back from the bounding set at exec), so that RLIMIT_MEMLOCK applies to
// it and to the programs it runs, even as root. Irreversible: call it in a forked child.
inline bool drop_ipc_lock() {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (syscall(SYS_capget, &hdr, data) != 0) return false;
    if (prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0) return false;
    data[0].effective &= ~(1u << CAP_IPC_LOCK);
    data[0].permitted &= ~(1u << CAP_IPC_LOCK);
    data[0].inheritable &= ~(1u << CAP_IPC_LOCK);
    return syscall(SYS_capset, &hdr, data) == 0;
}

}  // namespace vfab::lab
