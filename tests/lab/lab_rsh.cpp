// lab-rsh: the lab's remote command agent, an rsh/ssh stand-in for MPI launchers starting
// programs on a second guest: Open MPI's `--mca plm_rsh_agent lab-rsh` (`lab-rsh HOST orted ARGS`,
// or the whole remote line, shell syntax included, in one argument) and MPICH hydra's
// `-launcher rsh -launcher-exec lab-rsh` (`lab-rsh HOST CMD ARGS...`).
//   Server: lab-rsh --serve [PORT]   (in each guest; each connection in a forked child)
//   Client: lab-rsh [OPTIONS] HOST CMD [ARGS...]   Options before HOST are skipped (-l, -p, -o with
//     their argument); CMD and ARGS are joined with spaces, as rsh does, for the remote shell.
//     Port: env LAB_RSH_PORT, default 5022. Exits with the command's status, 255 when lab-rsh
//     itself fails. stdin is not forwarded (the command gets /dev/null).
// Wire format (TCP, u32s in network byte order; no authentication: the lab's own network only):
//   client -> server: u32 length, then the command line (run as `/bin/sh -c LINE` in a new
//     session). Then nothing; the client's closing the connection kills the process group.
//   server -> client: frames of 1 byte stream id, u32 length, data: 1 = stdout, 2 = stderr,
//     3 = exit status (4 bytes: u32 exit code or 128+signal), the last frame.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

namespace {

constexpr const char* kDefaultPort = "5022";
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kConnectRetryTime = 20s, kConnectRetryInterval = 200ms;
constexpr std::chrono::milliseconds kKillGraceTime = 2s;
constexpr int kRequestTimeoutSeconds = 30;
constexpr uint32_t kMaxCommandBytes = 1u << 20;
constexpr size_t kChunkBytes = 64 * 1024;
constexpr size_t kFrameHeaderBytes = 5;
constexpr uint8_t kStreamStdout = 1, kStreamStderr = 2, kStreamExitStatus = 3;
constexpr int kFailureExit = 255;

// Writes all of data (loops on partial writes and EINTR); false on error. Sockets are written
// with MSG_NOSIGNAL so that a vanished peer gives EPIPE, not SIGPIPE.
bool write_all(int fd, const void* data, size_t size, bool is_socket = false) {
    auto* bytes = static_cast<const char*>(data);
    while (size > 0) {
        ssize_t n = is_socket ? send(fd, bytes, size, MSG_NOSIGNAL) : write(fd, bytes, size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return false;
        bytes += n;
        size -= static_cast<size_t>(n);
    }
    return true;
}

// Reads exactly size bytes; false on EOF or error (a socket's SO_RCVTIMEO included).
bool read_exact(int fd, void* data, size_t size) {
    auto* bytes = static_cast<char*>(data);
    while (size > 0) {
        ssize_t n = read(fd, bytes, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        bytes += n;
        size -= static_cast<size_t>(n);
    }
    return true;
}

// text when it is a TCP port number (1-65535), else nullptr.
const char* valid_port(const char* text) {
    char* end = nullptr;
    long port = text ? std::strtol(text, &end, 10) : 0;
    return (text && *text && *end == '\0' && port >= 1 && port <= 65535) ? text : nullptr;
}

// ---- Server ----

// One frame, header and data in one write (one TCP segment for small frames).
bool send_frame(int sock, uint8_t stream, std::string_view data) {
    static std::string frame;
    uint32_t length_be = htonl(static_cast<uint32_t>(data.size()));
    frame.assign(1, static_cast<char>(stream)).append(reinterpret_cast<char*>(&length_be), 4);
    frame.append(data);
    return write_all(sock, frame.data(), frame.size(), true);
}

// Sends the exit status, after a line for the client's stderr saying why if there is one.
void send_exit_status(int sock, uint32_t status, const std::string& why = "") {
    if (!why.empty()) send_frame(sock, kStreamStderr, "lab-rsh: " + why + "\n");
    uint32_t status_be = htonl(status);
    send_frame(sock, kStreamExitStatus, {reinterpret_cast<char*>(&status_be), sizeof status_be});
}

// In the forked child: the command as `/bin/sh -c command`, leader of a new session (and so of
// a process group whose id is its pid), stdin from /dev/null, stdout and stderr to the pipes.
[[noreturn]] void exec_shell(const std::string& command, int stdout_fd, int stderr_fd) {
    setsid();
    signal(SIGPIPE, SIG_DFL);  // ignored signals would stay ignored across exec
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(stdout_fd, STDOUT_FILENO) < 0 ||
        dup2(stderr_fd, STDERR_FILENO) < 0)
        _exit(127);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    dprintf(STDERR_FILENO, "lab-rsh: cannot run /bin/sh: %s\n", std::strerror(errno));
    _exit(127);
}

// Ends the command's process group (its id: the shell's pid) once the client has gone away:
// SIGTERM, SIGKILL after kKillGraceTime if anything is left, and reaps the shell.
void kill_command(pid_t shell) {
    kill(-shell, SIGTERM);
    kill(shell, SIGTERM);  // in case the child has not reached setsid() yet
    bool shell_reaped = false;
    for (auto deadline = Clock::now() + kKillGraceTime; Clock::now() < deadline; std::this_thread::sleep_for(20ms)) {
        if (!shell_reaped && waitpid(shell, nullptr, WNOHANG) == shell) shell_reaped = true;
        if (shell_reaped && kill(-shell, 0) < 0 && errno == ESRCH) return;
    }
    kill(-shell, SIGKILL);
    if (!shell_reaped) kill(shell, SIGKILL);
    while (!shell_reaped && waitpid(shell, nullptr, 0) < 0 && errno == EINTR) {
    }
}

// One connection, in its own process: reads the request, runs it, relays its output and sends
// its exit status. Returns the process's exit code.
int handle_connection(int sock) {
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval request_timeout{kRequestTimeoutSeconds, 0};  // a silent client must not stay forever
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &request_timeout, sizeof request_timeout);
    uint32_t length_be = 0;
    if (!read_exact(sock, &length_be, sizeof length_be)) return 1;
    uint32_t length = ntohl(length_be);
    if (length > kMaxCommandBytes) {
        send_exit_status(sock, kFailureExit, "command too long: " + std::to_string(length) + " bytes");
        return 1;
    }
    std::string command(length, '\0');
    if (!read_exact(sock, command.data(), length)) return 1;

    int stdout_pipe[2], stderr_pipe[2];
    pid_t shell = -1;
    if (pipe2(stdout_pipe, O_CLOEXEC) == 0 && pipe2(stderr_pipe, O_CLOEXEC) == 0 && (shell = fork()) == 0)
        exec_shell(command, stdout_pipe[1], stderr_pipe[1]);
    if (shell < 0) {
        send_exit_status(sock, kFailureExit, std::string("cannot run it: ") + std::strerror(errno));
        return 1;
    }
    close(stdout_pipe[1]);
    close(stderr_pipe[1]);

    enum { socket_slot, stdout_slot, stderr_slot };
    pollfd fds[3] = {{sock, POLLIN, 0}, {stdout_pipe[0], POLLIN, 0}, {stderr_pipe[0], POLLIN, 0}};
    static char chunk[kChunkBytes];
    bool client_gone = false, shell_reaped = false;
    int wait_status = 0;
    while (!client_gone) {
        bool pipes_open = fds[stdout_slot].fd >= 0 || fds[stderr_slot].fd >= 0;
        // Both pipes at EOF: wait for the shell, still watching the client.
        if (!pipes_open && (shell_reaped = waitpid(shell, &wait_status, WNOHANG) == shell)) break;
        int ready = poll(fds, 3, pipes_open ? -1 : 100);
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) break;  // cannot watch the client any more: end the command
        short client_events = fds[socket_slot].revents;
        if (client_events & (POLLERR | POLLHUP | POLLNVAL)) {
            client_gone = true;
        } else if (client_events & POLLIN) {  // the client sends nothing more: EOF means it left
            char ignored[256];
            ssize_t n = read(sock, ignored, sizeof ignored);
            client_gone = n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
        }
        for (int slot : {stdout_slot, stderr_slot}) {
            if (client_gone || fds[slot].fd < 0 || fds[slot].revents == 0) continue;
            ssize_t n = read(fds[slot].fd, chunk, sizeof chunk);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) {
                close(fds[slot].fd);
                fds[slot].fd = -1;
            } else {
                uint8_t stream = slot == stdout_slot ? kStreamStdout : kStreamStderr;
                client_gone = !send_frame(sock, stream, {chunk, static_cast<size_t>(n)});
            }
        }
    }
    if (!shell_reaped) {  // the client went away (or poll failed)
        kill_command(shell);
        return 0;
    }
    kill(-shell, SIGKILL);  // whatever the command left in its process group
    uint32_t status = WIFEXITED(wait_status)     ? static_cast<uint32_t>(WEXITSTATUS(wait_status))
                      : WIFSIGNALED(wait_status) ? 128u + static_cast<uint32_t>(WTERMSIG(wait_status))
                                                 : kFailureExit;
    send_exit_status(sock, status);
    close(sock);
    return 0;
}

int serve(const char* port_text) {
    const char* port = valid_port(port_text);
    if (!port) {
        std::fprintf(stderr, "lab-rsh: --serve needs a TCP port (1-65535), not '%s'\n", port_text ? port_text : "");
        return kFailureExit;
    }
    int fd = 0;  // keep fds 0-2 taken: sockets and pipes must not land there (dup2 in exec_shell)
    while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= STDERR_FILENO) {
    }
    if (fd > STDERR_FILENO) close(fd);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction on_child {};
    on_child.sa_handler = [](int) {  // reaps the connection children
        int saved_errno = errno;
        while (waitpid(-1, nullptr, WNOHANG) > 0) {
        }
        errno = saved_errno;
    };
    on_child.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &on_child, nullptr);
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
    if (listener < 0 || setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) < 0 || listen(listener, 64) < 0) {
        std::fprintf(stderr, "lab-rsh: cannot listen on TCP port %s: %s\n", port, std::strerror(errno));
        return kFailureExit;
    }
    std::printf("lab-rsh: serving on %s\n", port);
    std::fflush(stdout);
    for (;;) {
        int sock = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (sock < 0 && errno != EINTR && errno != ECONNABORTED)
            std::this_thread::sleep_for(100ms);  // e.g. out of file descriptors: do not spin
        if (sock < 0) continue;
        pid_t child = fork();
        if (child == 0) {
            signal(SIGCHLD, SIG_DFL);  // this process waits for its own shell
            close(listener);
            _exit(handle_connection(sock));
        }
        if (child < 0) std::fprintf(stderr, "lab-rsh: fork: %s\n", std::strerror(errno));
        close(sock);
    }
}

// ---- Client ----

bool retryable_connect_error(int error) {
    return error == ECONNREFUSED || error == EHOSTUNREACH || error == ENETUNREACH || error == ETIMEDOUT ||
           error == ENETDOWN;
}

// One connection attempt, bounded by deadline: a connected blocking socket, or -1 and errno.
int try_connect(const addrinfo& address, Clock::time_point deadline) {
    int sock = socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock < 0) return -1;
    int error = connect(sock, address.ai_addr, address.ai_addrlen) < 0 ? errno : 0;
    while (error == EINPROGRESS) {
        pollfd writable{sock, POLLOUT, 0};
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        int ready = poll(&writable, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
        if (ready < 0 && errno == EINTR) continue;
        socklen_t size = sizeof error;
        if (ready < 0)
            error = errno;
        else if (ready == 0)
            error = ETIMEDOUT;
        else if (getsockopt(sock, SOL_SOCKET, SO_ERROR, &error, &size) < 0)
            error = errno;
    }
    if (error != 0) {
        close(sock);
        errno = error;
        return -1;
    }
    int one = 1;
    fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) & ~O_NONBLOCK);
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return sock;
}

// Connects to host:port, retrying for kConnectRetryTime while the other guest may be booting.
int connect_with_retries(const char* host, const char* port) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* addresses = nullptr;
    if (int resolved = getaddrinfo(host, port, &hints, &addresses); resolved != 0) {
        std::fprintf(stderr,
                     "lab-rsh: cannot resolve host %s (port %s): %s; check the name "
                     "(/etc/hosts in the guest)\n",
                     host, port, gai_strerror(resolved));
        return -1;
    }
    int sock = -1, error = 0;
    for (auto deadline = Clock::now() + kConnectRetryTime;;) {
        for (addrinfo* address = addresses; address && sock < 0; address = address->ai_next)
            if ((sock = try_connect(*address, deadline)) < 0) error = errno;
        bool out_of_time = Clock::now() + kConnectRetryInterval >= deadline;
        if (sock >= 0 || !retryable_connect_error(error) || out_of_time) break;
        std::this_thread::sleep_for(kConnectRetryInterval);
    }
    freeaddrinfo(addresses);
    if (sock < 0 && retryable_connect_error(error))
        std::fprintf(stderr,
                     "lab-rsh: cannot connect to %s port %s: %s (retried for %d s); is "
                     "`lab-rsh --serve %s` running there?\n",
                     host, port, std::strerror(error), static_cast<int>(kConnectRetryTime / 1s), port);
    else if (sock < 0)
        std::fprintf(stderr, "lab-rsh: cannot connect to %s port %s: %s\n", host, port, std::strerror(error));
    return sock;
}

// Copies the server's frames to stdout and stderr. Returns the command's exit status, 255 for a
// bad frame, or -1 when the connection ends without a status.
int relay_frames(int sock, const char* host) {
    static char data[kChunkBytes];
    unsigned char header[kFrameHeaderBytes];
    while (read_exact(sock, header, sizeof header)) {
        uint8_t stream = header[0];
        uint32_t length = 0;
        std::memcpy(&length, header + 1, sizeof length);
        length = ntohl(length);
        bool is_output = stream == kStreamStdout || stream == kStreamStderr;
        if (!is_output && (stream != kStreamExitStatus || length != 4)) {
            std::fprintf(stderr, "lab-rsh: %s: bad frame from the server (stream %u, %u bytes)\n", host, stream,
                         length);
            return kFailureExit;
        }
        for (size_t part = 0; length > 0; length -= static_cast<uint32_t>(part)) {
            part = std::min<size_t>(length, kChunkBytes);
            if (!read_exact(sock, data, part)) return -1;
            if (stream == kStreamExitStatus) {
                uint32_t status_be = 0;
                std::memcpy(&status_be, data, sizeof status_be);
                return static_cast<int>(std::min<uint32_t>(ntohl(status_be), kFailureExit));
            }
            // A failed local write (stdout closed) is ignored: the exit status must still arrive.
            write_all(stream == kStreamStdout ? STDOUT_FILENO : STDERR_FILENO, data, part);
        }
    }
    return -1;
}

int run_client(int argc, char** argv) {
    int arg = 1;
    while (arg < argc && argv[arg][0] == '-') {  // rsh/ssh options from the launcher
        std::string_view option = argv[arg];
        arg += (option == "-l" || option == "-p" || option == "-o") ? 2 : 1;
    }
    if (arg + 1 >= argc) {
        std::fprintf(stderr,
                     "usage: lab-rsh [OPTIONS] HOST CMD [ARGS...]   (port: env LAB_RSH_PORT, "
                     "default %s)\n       lab-rsh --serve PORT\n",
                     kDefaultPort);
        return kFailureExit;
    }
    const char* host = argv[arg];
    std::string command = argv[arg + 1];
    for (int i = arg + 2; i < argc; ++i) command.append(" ").append(argv[i]);
    const char* port_env = std::getenv("LAB_RSH_PORT");
    const char* port = valid_port(port_env && *port_env ? port_env : kDefaultPort);
    if (!port) {
        std::fprintf(stderr, "lab-rsh: LAB_RSH_PORT='%s' is not a TCP port (1-65535)\n", port_env);
        return kFailureExit;
    }
    // SIGTERM/SIGINT/SIGHUP end the client (default actions); the closed socket then makes the
    // server kill the remote command. Undo any ignoring or blocking inherited from the launcher.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
        signal(sig, SIG_DFL);
        sigaddset(&stop_signals, sig);
    }
    sigprocmask(SIG_UNBLOCK, &stop_signals, nullptr);
    int sock = connect_with_retries(host, port);
    if (sock < 0) return kFailureExit;
    uint32_t length_be = htonl(static_cast<uint32_t>(command.size()));
    bool sent =
        write_all(sock, &length_be, sizeof length_be, true) && write_all(sock, command.data(), command.size(), true);
    int status = sent ? relay_frames(sock, host) : -1;
    if (status < 0) std::fprintf(stderr, "lab-rsh: %s: connection lost\n", host);
    return status < 0 ? kFailureExit : status;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::string_view(argv[1]) == "--serve") {  // PORT: as the client's, by default
        const char* env = std::getenv("LAB_RSH_PORT");
        return serve(argc == 3 ? argv[2] : env ? env : kDefaultPort);
    }
    return run_client(argc, argv);
}
