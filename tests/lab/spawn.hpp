// Running other programs from a lab test: busybox tools, the kernel's modprobe, the project's
// examples in /vfab/bin. Output is captured (stdout and stderr apart); a program that outlives
// its time limit is killed and reported.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace vfab::lab {

struct Outcome {
    int rc = -1;               // exit status; 128 + signal when killed; -1 when it did not start
    bool timed_out = false;
    std::string out, err;
    std::string threads;   // when timed out: where each of its threads was (hung_threads)
    std::string summary() const {
        return "exit " + std::to_string(rc) + (timed_out ? " (killed: time limit)" : "") + "\nstdout:\n" + out +
               "stderr:\n" + err + (threads.empty() ? "" : "threads when killed:\n" + threads);
    }
};

// Where each thread of a live process is: its name, state, the kernel function it sleeps in
// and its system call with arguments (/proc/PID/task/TID/{comm,wchan,syscall}), one line each,
// so that a hung program's time-out tells what it waited for.
inline std::string hung_threads(pid_t pid) {
    namespace fs = std::filesystem;
    auto first_line = [](const fs::path& p) {
        std::ifstream in(p);
        std::string line;
        std::getline(in, line);
        return line;
    };
    std::string r;
    std::error_code ec;
    for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
        const std::string stat = first_line(t.path() / "stat");
        const size_t close = stat.rfind(')');
        const char state = close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
        r += "  " + t.path().filename().string() + " " + first_line(t.path() / "comm") + " " + state + " wchan=" +
             first_line(t.path() / "wchan") + " syscall=" + first_line(t.path() / "syscall") + "\n";
    }
    return r;
}

// A server's and its client's outcomes, for tests that run the two.
struct PairOutcome {
    Outcome server, client;
};

// A program started in the background; wait() collects it.
class Child {
public:
    // args[0]: a path, or a name looked up in PATH. `prepare`, when given, runs in the child
    // before the program (drop a capability, lower a limit, become another user); false from it
    // ends the child with status 126.
    explicit Child(std::vector<std::string> args, const std::function<bool()>& prepare = {}) {
        static int serial = 0;
        const std::string base = "/tmp/vfab-child-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
        out_path_ = base + ".out";
        err_path_ = base + ".err";
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        if (prepare) {
            fork_and_exec(argv, prepare);
            return;
        }
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
        posix_spawn_file_actions_destroy(&fa);
    }
    ~Child() {
        if (pid_ > 0) wait(std::chrono::seconds(0));
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    bool started() const { return pid_ > 0; }
    pid_t pid() const { return pid_; }
    // What the program has written to stdout so far.
    std::string output_so_far() const { return slurp(out_path_); }

    // Waits up to `limit` for the program to end; kills it after that.
    Outcome wait(std::chrono::milliseconds limit) {
        Outcome r;
        if (pid_ > 0) {
            int status = 0;
            const auto end = std::chrono::steady_clock::now() + limit;
            pid_t got;
            while ((got = ::waitpid(pid_, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < end)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            if (got == 0) {
                r.threads = hung_threads(pid_);
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &status, 0);
                r.timed_out = true;
            }
            r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            pid_ = -1;
        }
        r.out = slurp(out_path_);
        r.err = slurp(err_path_);
        std::filesystem::remove(out_path_);
        std::filesystem::remove(err_path_);
        return r;
    }

private:
    // Files opened 0666: a `prepare` that changes the user must still be able to write them.
    void fork_and_exec(std::vector<char*>& argv, const std::function<bool()>& prepare) {
        pid_ = ::fork();
        if (pid_ != 0) return;
        const int in = ::open("/dev/null", O_RDONLY);
        const int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
        const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (in < 0 || out < 0 || err < 0 || ::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0 || !prepare())
            ::_exit(126);
        ::execvp(argv[0], argv.data());
        ::_exit(127);
    }
    static std::string slurp(const std::string& path) {
        std::ifstream in(path);
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }
    pid_t pid_ = -1;
    std::string out_path_, err_path_;
};

inline Outcome run_program(std::vector<std::string> args, std::chrono::milliseconds limit = std::chrono::seconds(60),
                           const std::function<bool()>& prepare = {}) {
    Child c(std::move(args), prepare);
    return c.wait(limit);
}

// A program's own lines on stderr: not vfab's log lines ("vfab: ..."), not progress lines
// ("throughput: ..." of pktgen, "throughput <driver> ..." of lab_bench).
inline std::vector<std::string> own_lines(const std::string& err) {
    std::vector<std::string> out;
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);)
        if (!line.starts_with("vfab: ") && !line.starts_with("throughput: ") && !line.starts_with("throughput "))
            out.push_back(line);
    return out;
}

}  // namespace vfab::lab
