// What the lab's libibverbs helpers on rxe (rxe_verbs_peer, rxe_mcast_peer) share: failing
// with errno's words, and the line protocol over their TCP connection to the test.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace vfab::lab::peer {

inline int die(const char* what) {
    std::printf("FAIL %s: %s\n", what, std::strerror(errno));
    return 1;
}

inline std::string read_line(int fd) {
    std::string s;
    char c;
    while (::read(fd, &c, 1) == 1 && c != '\n') s += c;
    return s;
}

inline void write_str(int fd, const std::string& s) { (void)!::write(fd, s.data(), s.size()); }

}  // namespace vfab::lab::peer
