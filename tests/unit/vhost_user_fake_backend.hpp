// A vhost-user back-end for the front-end's unit tests, on a socketpair or a listening
// socket, in a thread. It answers like a minimal virtio-net back-end (features, protocol
// features, queue count, vring bases, REPLY_ACK), records every message with the descriptors
// that came with it, and lets a test take over any message (to close the connection, stall,
// answer wrongly or in pieces). The wire format is written here from the specification on its
// own, so that the front-end is checked against it and not against itself.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vhost_fake {

// Request codes and flags, from vhost-user.rst.
enum : uint32_t {
    GET_FEATURES = 1, SET_FEATURES = 2, SET_OWNER = 3, RESET_OWNER = 4, SET_MEM_TABLE = 5, SET_VRING_NUM = 8,
    SET_VRING_ADDR = 9, SET_VRING_BASE = 10, GET_VRING_BASE = 11, SET_VRING_KICK = 12, SET_VRING_CALL = 13,
    SET_VRING_ERR = 14, GET_PROTOCOL_FEATURES = 15, SET_PROTOCOL_FEATURES = 16, GET_QUEUE_NUM = 17,
    SET_VRING_ENABLE = 18, GET_CONFIG = 24, RESET_DEVICE = 34,
};
constexpr uint32_t kFlagVersion = 1, kFlagReply = 1u << 2, kFlagNeedReply = 1u << 3;

// A descriptor received with a message; closed with it.
struct OwnedFd {
    int fd = -1;
    explicit OwnedFd(int f) : fd(f) {}
    OwnedFd(const OwnedFd&) = delete;
    OwnedFd& operator=(const OwnedFd&) = delete;
    ~OwnedFd() { if (fd >= 0) ::close(fd); }
};

struct Msg {
    uint32_t request = 0;
    uint32_t flags = 0;
    std::vector<uint8_t> payload;
    std::vector<std::shared_ptr<OwnedFd>> fds;

    template <class T>
    T at(size_t off) const {
        T v{};
        if (off + sizeof v <= payload.size()) std::memcpy(&v, payload.data() + off, sizeof v);
        return v;
    }
    uint64_t u64() const { return at<uint64_t>(0); }
    bool need_reply() const { return flags & kFlagNeedReply; }
};

class FakeBackend {
public:
    // What a hook did with a message: let the default answer it, answered it itself, or the
    // connection is to be closed now.
    enum class Action { fallthrough, handled, close };
    using Hook = std::function<Action(const Msg&, FakeBackend&)>;

    // VERSION_1, protocol features, MRG_RXBUF, EVENT_IDX.
    uint64_t features = (1ull << 32) | (1ull << 30) | (1ull << 15) | (1ull << 29);
    // MQ, LOG_SHMFD, REPLY_ACK, STATUS.
    uint64_t protocol_features = (1ull << 0) | (1ull << 1) | (1ull << 3) | (1ull << 16);
    uint64_t queue_num = 2;
    std::map<uint32_t, uint32_t> vring_base;   // GET_VRING_BASE answers
    Hook hook;

    ~FakeBackend() { stop(); }

    // Serves one end of a fresh socketpair; returns the other end for the front-end.
    int serve_pair() {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -1;
        conn_ = sv[1];
        thread_ = std::thread([this] { loop(); });
        return sv[0];
    }
    // Listens on `path` and serves the first connection.
    bool listen_on(const std::string& path) {
        listen_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
        if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || ::listen(listen_, 1) < 0) return false;
        thread_ = std::thread([this] {
            pollfd p{listen_, POLLIN, 0};
            while (!stopping_ && ::poll(&p, 1, 50) == 0) {}
            if (stopping_) return;
            conn_ = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
            if (conn_ >= 0) loop();
        });
        return true;
    }
    void stop() {
        stopping_ = true;
        if (conn_ >= 0) ::shutdown(conn_, SHUT_RDWR);
        if (thread_.joinable()) thread_.join();
        if (conn_ >= 0) ::close(conn_);
        if (listen_ >= 0) ::close(listen_);
        conn_ = listen_ = -1;
    }
    // Waits until the back-end thread is done (the front-end closed, or a hook closed).
    void join() {
        if (thread_.joinable()) thread_.join();
    }

    // Sends raw bytes (to answer in pieces or wrongly).
    void write_raw(const void* p, size_t n) { (void)::send(conn_, p, n, MSG_NOSIGNAL); }
    void reply(const Msg& m, const void* payload, uint32_t size) {
        uint32_t h[3] = {m.request, kFlagVersion | kFlagReply, size};
        std::vector<uint8_t> out(sizeof h + size);
        std::memcpy(out.data(), h, sizeof h);
        if (size) std::memcpy(out.data() + sizeof h, payload, size);
        write_raw(out.data(), out.size());
    }
    void reply_u64(const Msg& m, uint64_t v) { reply(m, &v, sizeof v); }
    // Closes the connection from the back-end's side, as a back-end that exits does.
    void hang_up() {
        ::shutdown(conn_, SHUT_RDWR);
    }

    std::vector<Msg> messages() {
        std::lock_guard lock(mu_);
        return log_;
    }
    std::vector<uint32_t> requests() {
        std::vector<uint32_t> out;
        for (auto& m : messages()) out.push_back(m.request);
        return out;
    }
    // The last message of type `request` (an empty Msg if none).
    Msg last(uint32_t request) {
        auto all = messages();
        for (auto it = all.rbegin(); it != all.rend(); ++it)
            if (it->request == request) return *it;
        return Msg{};
    }
    // Waits up to a second for a message of type `request` to arrive.
    bool wait_for(uint32_t request) {
        for (int i = 0; i < 200; ++i) {
            for (auto r : requests())
                if (r == request) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return false;
    }

private:
    bool read_exact(void* to, size_t n, std::vector<std::shared_ptr<OwnedFd>>* fds) {
        auto* p = static_cast<uint8_t*>(to);
        while (n > 0) {
            iovec iov{p, n};
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
            msghdr mh{};
            mh.msg_iov = &iov;
            mh.msg_iovlen = 1;
            mh.msg_control = control;
            mh.msg_controllen = sizeof control;
            ssize_t got = ::recvmsg(conn_, &mh, MSG_CMSG_CLOEXEC);
            if (got <= 0) return false;
            for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
                for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
                    int fd;
                    std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                    auto owned = std::make_shared<OwnedFd>(fd);
                    if (fds) fds->push_back(owned);
                }
            }
            p += got;
            n -= static_cast<size_t>(got);
        }
        return true;
    }

    void loop() {
        for (;;) {
            uint32_t h[3];
            Msg m;
            if (!read_exact(h, sizeof h, &m.fds)) return;
            m.request = h[0];
            m.flags = h[1];
            m.payload.resize(h[2]);
            if (h[2] && !read_exact(m.payload.data(), h[2], &m.fds)) return;
            {
                std::lock_guard lock(mu_);
                log_.push_back(m);
            }
            Action a = hook ? hook(m, *this) : Action::fallthrough;
            if (a == Action::close) {
                hang_up();
                return;
            }
            if (a == Action::fallthrough) answer(m);
        }
    }

    void answer(const Msg& m) {
        switch (m.request) {
            case GET_FEATURES: return reply_u64(m, features);
            case GET_PROTOCOL_FEATURES: return reply_u64(m, protocol_features);
            case GET_QUEUE_NUM: return reply_u64(m, queue_num);
            case GET_VRING_BASE: {
                uint32_t s[2] = {m.at<uint32_t>(0), vring_base[m.at<uint32_t>(0)]};
                return reply(m, s, sizeof s);
            }
            case GET_CONFIG: {   // config space: bytes 0..5 a MAC address
                std::vector<uint8_t> p = m.payload;
                uint32_t off = m.at<uint32_t>(0);
                for (size_t i = 12; i < p.size(); ++i) p[i] = static_cast<uint8_t>(0x50 + off + (i - 12));
                return reply(m, p.data(), static_cast<uint32_t>(p.size()));
            }
            default:
                if (m.need_reply()) reply_u64(m, 0);
        }
    }

    std::mutex mu_;
    std::vector<Msg> log_;
    std::thread thread_;
    std::atomic<int> conn_{-1};
    int listen_ = -1;
    std::atomic<bool> stopping_{false};
};

}  // namespace vhost_fake
