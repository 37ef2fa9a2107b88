#include "devctl_context.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace vfab::devctl {

Paths Paths::under(const std::string& root) {
    Paths p;
    p.sysfs = root + "/sys";
    p.dev = root + "/dev";
    p.proc = root + "/proc";
    p.modules = root + "/lib/modules";
    p.run = root + "/run/vfab/devctl";
    return p;
}

namespace {

// Closes a pipe end when it goes out of scope.
struct Fd {
    int fd = -1;
    ~Fd() { if (fd >= 0) ::close(fd); }
};

std::string drain(int fd) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) out.append(buf, static_cast<size_t>(n));
    return out;
}

}  // namespace

Result<CommandResult> run_command(const std::vector<std::string>& argv) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Error::from_errno(errno, "pipe");
    Fd rd{pipe_fds[0]}, wr{pipe_fds[1]};

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, wr.fd, 1);
    posix_spawn_file_actions_adddup2(&actions, wr.fd, 2);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid;
    int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return Error::from_errno(rc, str_cat("cannot run ", argv[0]), "is it installed and in PATH?");

    ::close(wr.fd);
    wr.fd = -1;
    CommandResult result;
    result.output = drain(rd.fd);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return Error::from_errno(errno, str_cat("waiting for ", argv[0]));
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
}

}  // namespace vfab::devctl
