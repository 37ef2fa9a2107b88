// rsockets (<rdma/rsocket.h>): exported, as every program linked against librdmacm imports them
// (rdmacm-utils' shared code does, even rping). Not yet carried over vfab's transport: each call
// fails with ENOSYS, so that a program or librspreload falls back or says so (docs/cm.md).
#include <rdma/rsocket.h>

#include <cerrno>

namespace {
int nosys() {
    errno = ENOSYS;
    return -1;
}
}  // namespace

extern "C" {
int rsocket(int, int, int) { return nosys(); }
int rbind(int, const sockaddr*, socklen_t) { return nosys(); }
int rlisten(int, int) { return nosys(); }
int raccept(int, sockaddr*, socklen_t*) { return nosys(); }
int rconnect(int, const sockaddr*, socklen_t) { return nosys(); }
int rshutdown(int, int) { return nosys(); }
int rclose(int) { return nosys(); }
ssize_t rrecv(int, void*, size_t, int) { return nosys(); }
ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return nosys(); }
ssize_t rrecvmsg(int, msghdr*, int) { return nosys(); }
ssize_t rsend(int, const void*, size_t, int) { return nosys(); }
ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) { return nosys(); }
ssize_t rsendmsg(int, const msghdr*, int) { return nosys(); }
ssize_t rread(int, void*, size_t) { return nosys(); }
ssize_t rreadv(int, const iovec*, int) { return nosys(); }
ssize_t rwrite(int, const void*, size_t) { return nosys(); }
ssize_t rwritev(int, const iovec*, int) { return nosys(); }
int rpoll(pollfd*, nfds_t, int) { return nosys(); }
int rselect(int, fd_set*, fd_set*, fd_set*, timeval*) { return nosys(); }
int rgetpeername(int, sockaddr*, socklen_t*) { return nosys(); }
int rgetsockname(int, sockaddr*, socklen_t*) { return nosys(); }
int rsetsockopt(int, int, int, const void*, socklen_t) { return nosys(); }
int rgetsockopt(int, int, int, void*, socklen_t*) { return nosys(); }
int rfcntl(int, int, ...) { return nosys(); }
off_t riomap(int, void*, size_t, int, int, off_t) { return nosys(); }
int riounmap(int, void*, size_t) { return nosys(); }
size_t riowrite(int, const void*, size_t, off_t, int) {
    errno = ENOSYS;
    return 0;
}
}
