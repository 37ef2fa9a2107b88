// rdma-core's own test suite (Debian's python3-pyverbs 44.0, /usr/share/doc/rdma-core/tests) on
// the kernel's rxe (rxe0 on 0000:00:03.0, GID index 1: RxePeer) and on vfab's drop-in
// libibverbs.so.1 (vfab0 = 0000:00:02.0 as 10.77.0.1, GID index 0, through vfab-run), in one
// boot. The suite runs unmodified with `run_tests.py --dev DEV --gid N -v`; its verbose
// output gives every test's verdict. Every test that passes on rxe must pass on vfab, but for
// the ones tests/lab/pyverbs_exceptions names, each with its reason. The lab boot needs
// scripts/lab --pyverbs (Python and pyverbs in the guest: scripts/lab.d/pyverbs.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rxe_suite.hpp"
#include "spawn.hpp"

namespace vfab::lab {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kVfabNic = "0000:00:02.0";
constexpr const char* kVfabIp = "10.77.0.1";
constexpr const char* kShipped = "/usr/share/doc/rdma-core/tests";
constexpr const char* kSuiteDir = "/tmp/pyverbs";   // the gunzipped copy the suite runs from

// tests/lab/pyverbs_exceptions, compiled in (CMake writes it into this string).
constexpr const char* kExceptions =
#include "pyverbs_exceptions.inc"
    ;

// A process that writes nothing for this long is hung (a test waiting for a completion that
// never comes): far longer than any test takes under TCG (all of rxe0's run takes ~25 s).
constexpr auto kStallLimit = 120s;
// A whole run (all of a device's tests, over as many processes as crashes and hangs need).
constexpr auto kRunLimit = 900s;
// Tests run again alone (after a crash or a hang, or to get a report a crash lost), at most.
constexpr int kAloneMax = 30;

struct Verdict {
    std::string status;   // ok, FAIL, ERROR, skipped, expected failure, unexpected success, crashed, hung, not run
    std::string reason;   // a skip's reason, a failure's last traceback line, how a process ended
    std::string detail;   // a failure's whole report
};

struct SuiteRun {
    std::string device;
    std::vector<std::string> order;            // test ids, as they ran
    std::map<std::string, Verdict> verdicts;   // by test id (tests.test_qp.QPTest.test_x)
    std::string log;                           // every process's output, one after another
    int processes = 0;
    double seconds = 0;
    std::string trouble;   // set when the run could not be completed
};

// "test_x (tests.test_qp.QPTest.test_x)" at the start of a line: the test id. A test with a
// docstring has its first line on the next line, before " ... VERDICT".
const std::regex kTestLine(R"(^(\w+) \((tests\.[\w.]+)\)(.*)$)");
// A verdict at the end of a line ("... ok") or alone on a line (when the test printed after "...").
const std::regex kVerdict(R"((?:^|\.\.\. )(ok|FAIL|ERROR|expected failure|unexpected success|skipped (.*))$)");
// A report's head: "ERROR: test_x (tests.test_qp.QPTest.test_x)" (and the docstring's line).
const std::regex kReport(R"(^(ERROR|FAIL|UNEXPECTED SUCCESS): (\w+) \((tests\.[\w.]+)\)$)");

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// A skip's reason, as unittest prints it: repr() of the string.
std::string unquote(std::string r) {
    if (r.size() >= 2 && (r.front() == '\'' || r.front() == '"') && r.back() == r.front()) r = r.substr(1, r.size() - 2);
    return r;
}

// Reads unittest's verbose output into `run`: each test's verdict in order, then the reports
// of failures and errors ("=====\nERROR: NAME (ID)\n-----\nTraceback ..."). Returns the id of
// a test that started and got no verdict (the one a crash or hang stopped), else "".
std::string parse_output(const std::string& out, SuiteRun& run) {
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    std::string pending;
    std::smatch m;
    size_t i = 0;
    for (; i < lines.size(); ++i) {
        const std::string& l = lines[i];
        if (starts(l, "======") || starts(l, "Ran ")) break;
        std::string rest = l;
        if (std::regex_match(l, m, kTestLine)) {
            pending = m[2];
            rest = m[3];
            run.order.push_back(pending);
        }
        if (pending.empty() || !std::regex_search(rest, m, kVerdict)) continue;
        Verdict v;
        v.status = m[1];
        if (starts(v.status, "skipped")) {
            v.status = "skipped";
            v.reason = unquote(m[2]);
        }
        run.verdicts[pending] = v;
        pending.clear();
    }
    for (; i < lines.size(); ++i) {
        std::smatch h;
        if (!starts(lines[i], "======") || i + 1 >= lines.size() || !std::regex_match(lines[i + 1], h, kReport)) continue;
        const std::string id = h[3];
        size_t j = i + 2;
        while (j < lines.size() && !starts(lines[j], "------")) ++j;   // the docstring's line
        std::string detail, last;
        for (++j; j < lines.size(); ++j) {
            const std::string& l = lines[j];
            if (starts(l, "======") || (starts(l, "------") && j + 1 < lines.size() && starts(lines[j + 1], "Ran "))) break;
            detail += l + "\n";
            // The exception's own line(s): not indented, not the traceback's headings.
            if (!l.empty() && l[0] != ' ' && !starts(l, "Traceback") && !starts(l, "During handling") &&
                !starts(l, "The above exception"))
                last = l;
        }
        Verdict& v = run.verdicts[id];
        if (v.status.empty()) v.status = h[1];
        v.reason = last.size() > 300 ? last.substr(0, 300) + "..." : last;   // a data mismatch prints whole buffers
        v.detail = detail;
        i = j - 1;
    }
    return pending;
}

// A program whose stdout and stderr go to one file, in a process group of its own (the suite
// forks: test_fork, the rdma_cm tests' two processes), killed with its group on request.
class Watched {
public:
    explicit Watched(const std::vector<std::string>& cmd) {
        static int serial = 0;
        path_ = "/tmp/vfab-pyverbs-" + std::to_string(::getpid()) + "-" + std::to_string(serial++) + ".out";
        std::vector<std::string> args = cmd;
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        posix_spawnattr_t at;
        posix_spawnattr_init(&at);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&at, 0);
        if (posix_spawnp(&pid_, argv[0], &fa, &at, argv.data(), environ) != 0) pid_ = -1;
        posix_spawnattr_destroy(&at);
        posix_spawn_file_actions_destroy(&fa);
    }
    ~Watched() {
        if (pid_ > 0) {
            ::kill(-pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        std::filesystem::remove(path_);
    }
    Watched(const Watched&) = delete;
    Watched& operator=(const Watched&) = delete;

    bool started() const { return pid_ > 0; }
    uintmax_t size() const {
        std::error_code ec;
        const auto n = std::filesystem::file_size(path_, ec);
        return ec ? 0 : n;
    }
    // The exit status (128 + signal when killed by one) once it ended, else nullopt.
    std::optional<int> poll() {
        if (pid_ <= 0) return status_;
        int st = 0;
        if (::waitpid(pid_, &st, WNOHANG) != pid_) return std::nullopt;
        pid_ = -1;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
    }
    void kill_group() {
        if (pid_ <= 0) return;
        ::kill(-pid_, SIGKILL);
        int st = 0;
        ::waitpid(pid_, &st, 0);
        pid_ = -1;
        status_ = 128 + SIGKILL;
    }
    std::string output() const {
        std::ifstream in(path_);
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }

private:
    pid_t pid_ = -1;
    std::optional<int> status_ = -1;
    std::string path_;
};

struct Ended {
    std::string out;
    int rc = -1;
    bool stalled = false, out_of_time = false;
};

// Runs `cmd` until it ends, writes nothing for kStallLimit (a hung test) or `deadline` passes.
Ended run_watched(const std::vector<std::string>& cmd, Clock::time_point deadline) {
    Ended e;
    Watched w(cmd);
    if (!w.started()) {
        e.out = "could not start " + cmd.front() + "\n";
        return e;
    }
    uintmax_t seen = 0;
    auto last_change = Clock::now();
    while (true) {
        if (const auto rc = w.poll()) {
            e.rc = *rc;
            break;
        }
        const uintmax_t now = w.size();
        if (now != seen) {
            seen = now;
            last_change = Clock::now();
        }
        e.stalled = Clock::now() - last_change > kStallLimit;
        e.out_of_time = Clock::now() > deadline;
        if (e.stalled || e.out_of_time) {
            w.kill_group();
            e.rc = 128 + SIGKILL;
            break;
        }
        std::this_thread::sleep_for(250ms);
    }
    e.out = w.output();
    return e;
}

// The guest's PATH with iproute2's ip (/usr/sbin) before busybox's: the suite runs `ip -j`.
const char* kPath = "PATH=/vfab/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::vector<std::string> python(std::vector<std::string> args) {
    std::vector<std::string> a = {"env", kPath, "python3", "-u", std::string(kSuiteDir) + "/run_tests.py"};
    a.insert(a.end(), args.begin(), args.end());
    return a;
}

// vfab-run in the guest, as tests/lab/verbs_dropin_test.cpp: the drop-in library (copied
// beside it into /vfab/bin) first on the library path, vfab0 = 00:02.0 with its address.
std::vector<std::string> on_vfab(std::vector<std::string> args) {
    std::vector<std::string> a = {"/vfab/bin/vfab-run", "--device", std::string(kVfabNic) + "=" + kVfabIp, "--"};
    a.insert(a.end(), args.begin(), args.end());
    return a;
}

// The suite's test ids in the order it runs them (run_tests.py --list-tests).
std::vector<std::string> list_tests() {
    const Ended e = run_watched(python({"--list-tests"}), Clock::now() + 300s);
    std::vector<std::string> ids;
    std::istringstream in(e.out);
    for (std::string l; std::getline(in, l);)
        if (l.rfind("tests.", 0) == 0 && l.find(' ') == std::string::npos) ids.push_back(l);
    return ids;
}

// tests/lab/pyverbs_exceptions: "TEST-ID-REGEX REASON" lines (a test that passes on rxe0 and
// is known not to on vfab0) and "alone TEST-ID-REGEX REASON" lines (a test run in a process
// of its own on both devices, as it damages the process it runs in); # comments.
struct Exception {
    std::regex id;
    std::string pattern, reason;
    bool used = false;
};
struct Exceptions {
    std::vector<Exception> differ, alone;
};

Exceptions exceptions() {
    Exceptions out;
    std::istringstream in(kExceptions);
    for (std::string l; std::getline(in, l);) {
        if (l.find_first_not_of(" \t") == std::string::npos || l[0] == '#') continue;
        std::istringstream f(l);
        Exception x;
        f >> x.pattern;
        const bool alone = x.pattern == "alone";
        if (alone) f >> x.pattern;
        std::getline(f >> std::ws, x.reason);
        x.id = std::regex(x.pattern);
        (alone ? out.alone : out.differ).push_back(std::move(x));
    }
    return out;
}

bool matches(const std::vector<Exception>& xs, const std::string& id) {
    return std::any_of(xs.begin(), xs.end(), [&](const Exception& x) { return std::regex_match(id, x.id); });
}

// One test in a process of its own: its verdict ("crashed", "hung" or "no verdict" when it
// gave none), with the process's output in the run's log.
Verdict run_alone(SuiteRun& run, const std::vector<std::string>& base, bool vfab, const std::string& id) {
    std::vector<std::string> args = base;
    args.push_back(id);
    const Ended e = run_watched(vfab ? on_vfab(python(args)) : python(args), Clock::now() + kStallLimit);
    ++run.processes;
    run.log += "@@ process " + std::to_string(run.processes) + " (" + id + " alone), exit " + std::to_string(e.rc) + "\n" + e.out;
    SuiteRun one;
    const std::string stuck = parse_output(e.out, one);
    if (const auto it = one.verdicts.find(id); stuck.empty() && it != one.verdicts.end()) return it->second;
    Verdict v;
    v.status = !stuck.empty() ? (e.stalled ? "hung" : "crashed") : "no verdict";
    v.reason = e.stalled ? "no output for " + std::to_string(kStallLimit.count()) + " s: killed"
                         : "the process ended with status " + std::to_string(e.rc);
    v.detail = e.out.substr(e.out.size() > 3000 ? e.out.size() - 3000 : 0);
    return v;
}

// The whole suite on one device: one process for all tests but the ones to run alone, and
// after a crash or a hang another for the tests that had not run, starting after the one that
// crashed or hung; then each test to run alone in a process of its own.
SuiteRun run_suite(const std::string& dev, const std::string& gid, bool vfab, const std::vector<Exception>& alone) {
    SuiteRun run;
    run.device = dev;
    const auto t0 = Clock::now();
    const auto deadline = t0 + kRunLimit;
    const std::vector<std::string> base = {"--dev", dev, "--gid", gid, "-v"};
    std::vector<std::string> all, remaining, solo;
    auto split = [&] {
        remaining.clear();
        for (const std::string& id : all)
            if (matches(alone, id)) {
                if (std::find(solo.begin(), solo.end(), id) == solo.end()) solo.push_back(id);
            } else if (!run.verdicts.count(id)) {
                remaining.push_back(id);
            }
    };
    if (!alone.empty()) {
        all = list_tests();
        if (all.empty()) {
            run.trouble = "run_tests.py --list-tests listed no test";
            return run;
        }
        split();
    }
    for (int attempt = 0; attempt < 16; ++attempt) {
        std::vector<std::string> args = base;
        args.insert(args.end(), remaining.begin(), remaining.end());
        const Ended e = run_watched(vfab ? on_vfab(python(args)) : python(args), deadline);
        ++run.processes;
        run.log += "@@ process " + std::to_string(run.processes) + " (" +
                   (remaining.empty() ? std::string("all tests") : std::to_string(remaining.size()) + " tests named") +
                   "), exit " + std::to_string(e.rc) + "\n" + e.out;
        const size_t before = run.verdicts.size();
        const std::string stuck = parse_output(e.out, run);
        if (e.out.find("\nRan ") != std::string::npos && !e.stalled && !e.out_of_time) break;
        if (!stuck.empty()) {
            Verdict& v = run.verdicts[stuck];
            v.status = e.stalled ? "hung" : e.out_of_time ? "not run" : "crashed";
            v.reason = e.stalled ? "no output for " + std::to_string(kStallLimit.count()) + " s: killed"
                       : e.out_of_time ? "the run's time limit passed"
                                       : "the process ended with status " + std::to_string(e.rc);
            v.detail = e.out.substr(e.out.size() > 3000 ? e.out.size() - 3000 : 0);
        } else if (run.verdicts.size() == before) {
            run.trouble = "a process ran no test (exit " + std::to_string(e.rc) + "):\n" + e.out;
            break;
        }
        if (e.out_of_time) {
            run.trouble = "the run's time limit (" + std::to_string(kRunLimit.count()) + " s) passed";
            break;
        }
        if (all.empty()) all = list_tests();
        split();
        if (remaining.empty()) break;
    }
    if (all.empty() && !run.trouble.empty()) all = list_tests();
    for (const std::string& id : solo) {
        if (Clock::now() > deadline) break;
        run.order.push_back(id);
        run.verdicts[id] = run_alone(run, base, vfab, id);
    }
    for (const std::string& id : all)
        if (!run.verdicts.count(id)) {
            run.verdicts[id] = {"not run", run.trouble.empty() ? "" : "the run ended early", ""};
            run.order.push_back(id);
        }
    // A crash loses the reports of the failures before it in that process, and a crash may come
    // from an earlier test's damage: each test that crashed, hung or lost its report runs again
    // alone, and what it does then is kept beside its verdict.
    int again = 0;
    for (const std::string& id : run.order) {
        Verdict& v = run.verdicts[id];
        const bool lost = (v.status == "ERROR" || v.status == "FAIL") && v.detail.empty();
        if (!(lost || v.status == "crashed" || v.status == "hung") || matches(alone, id)) continue;
        if (++again > kAloneMax || Clock::now() > deadline) break;
        const Verdict a = run_alone(run, base, vfab, id);
        if (lost && a.status == v.status) {
            v.reason = a.reason;
            v.detail = a.detail;
        } else {
            v.reason += (v.reason.empty() ? "" : "; ") + std::string("alone: ") + a.status +
                        (a.reason.empty() ? "" : ": " + a.reason);
            if (!a.detail.empty()) v.detail += "alone:\n" + a.detail;
        }
    }
    run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return run;
}

std::string short_name(const std::string& id) { return id.rfind("tests.", 0) == 0 ? id.substr(6) : id; }

std::map<std::string, int> counts(const SuiteRun& r) {
    std::map<std::string, int> c;
    for (const auto& [id, v] : r.verdicts) ++c[v.status];
    return c;
}

class Pyverbs : public RxeSuite {};

TEST_F(Pyverbs, EveryTestThatPassesOnRxePassesOnVfab) {
    ASSERT_TRUE(std::filesystem::exists(std::string(kShipped) + "/run_tests.py"))
        << kShipped << " is not in the guest: boot the lab with scripts/lab --pyverbs";
    ASSERT_TRUE(std::filesystem::exists("/vfab/bin/vfab-run") && std::filesystem::exists("/vfab/bin/libibverbs.so.1"))
        << "vfab-run and the drop-in libibverbs.so.1 belong in /vfab/bin (scripts/lab --extra)";
    // A copy of the suite with its files gunzipped, as its README asks.
    std::filesystem::remove_all(kSuiteDir);
    std::filesystem::copy(kShipped, kSuiteDir, std::filesystem::copy_options::recursive);
    std::vector<std::string> gz = {"gunzip", "-f"};
    for (const auto& f : std::filesystem::directory_iterator(kSuiteDir))
        if (f.path().extension() == ".gz") gz.push_back(f.path());
    const Outcome g = run_program(gz, 60s);
    ASSERT_EQ(g.rc, 0) << g.summary();

    Exceptions known = exceptions();
    const SuiteRun rxe = run_suite("rxe0", "1", false, known.alone);
    const SuiteRun vfab = run_suite("vfab0", "0", true, known.alone);
    const bool raw = std::getenv("VFAB_PYVERBS_LOG") != nullptr;

    // Every test of either run, in the order they ran.
    std::vector<std::string> ids = rxe.order;
    for (const std::string& id : vfab.order)
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);

    // The table: every test that either device did not skip (the ones both skip, most of them
    // for mlx5 or EFA hardware, are counted below it).
    std::vector<std::string> regressions;
    std::map<std::string, std::string> known_why;   // test -> the exception's reason
    int both_skipped = 0;
    std::printf("\n%-72s %-9s %-9s\n", "pyverbs test", "rxe0", "vfab0");
    for (const std::string& id : ids) {
        const auto a = rxe.verdicts.find(id), b = vfab.verdicts.find(id);
        const std::string sa = a == rxe.verdicts.end() ? "-" : a->second.status;
        const std::string sb = b == vfab.verdicts.end() ? "-" : b->second.status;
        std::string note;
        if (sa == "ok" && sb != "ok") {
            auto x = std::find_if(known.differ.begin(), known.differ.end(),
                                  [&](const Exception& e) { return std::regex_match(id, e.id); });
            if (x != known.differ.end()) {
                x->used = true;
                known_why[id] = x->reason;
                note = "known";
            } else {
                regressions.push_back(id);
                note = "<== passes on rxe0 only";
            }
        }
        if (sa == "skipped" && sb == "skipped") {
            ++both_skipped;
            continue;
        }
        std::printf("%-72s %-9s %-9s %s\n", short_name(id).c_str(), sa.c_str(), sb.c_str(), note.c_str());
    }
    std::printf("(%d more tests skipped on both)\n", both_skipped);
    std::printf("\n%-20s %8s %8s\n", "verdict", "rxe0", "vfab0");
    const auto ca = counts(rxe), cb = counts(vfab);
    std::set<std::string> statuses;
    for (const auto& [s, n] : ca) statuses.insert(s);
    for (const auto& [s, n] : cb) statuses.insert(s);
    for (const std::string& s : statuses)
        std::printf("%-20s %8d %8d\n", s.c_str(), ca.count(s) ? ca.at(s) : 0, cb.count(s) ? cb.at(s) : 0);
    std::printf("%-20s %8zu %8zu\n%-20s %8.0f %8.0f\n%-20s %8d %8d\n\n", "tests", rxe.verdicts.size(),
                vfab.verdicts.size(), "seconds", rxe.seconds, vfab.seconds, "processes", rxe.processes, vfab.processes);

    // Why each test that passes on rxe0 does not on vfab0: vfab0's error, and the known reason
    // (or the whole report for one not known).
    for (const std::string& id : ids) {
        const auto a = rxe.verdicts.find(id), b = vfab.verdicts.find(id);
        if (a == rxe.verdicts.end() || a->second.status != "ok") continue;
        if (b != vfab.verdicts.end() && b->second.status == "ok") continue;
        const Verdict v = b == vfab.verdicts.end() ? Verdict{"-", "", ""} : b->second;
        std::printf("@@pyverbs vfab0 %s %s: %s\n", short_name(id).c_str(), v.status.c_str(), v.reason.c_str());
        if (known_why.count(id)) std::printf("    known: %s\n", known_why[id].c_str());
        else if (!v.detail.empty()) std::printf("%s\n", v.detail.c_str());
    }
    // And what fails on either device where the other skips or fails too: no comparison, but
    // worth knowing.
    for (const SuiteRun* r : {&rxe, &vfab})
        for (const std::string& id : r->order) {
            const Verdict& v = r->verdicts.at(id);
            const SuiteRun& other = r == &rxe ? vfab : rxe;
            const auto o = other.verdicts.find(id);
            if (v.status == "ok" || v.status == "skipped" || (r == &vfab && o != other.verdicts.end() && o->second.status == "ok"))
                continue;
            std::printf("@@pyverbs %s %s %s (%s: %s): %s\n", r->device.c_str(), short_name(id).c_str(), v.status.c_str(),
                        other.device.c_str(), o == other.verdicts.end() ? "-" : o->second.status.c_str(), v.reason.c_str());
        }
    for (const Exception& x : known.differ)
        if (!x.used)
            std::printf("pyverbs_exceptions: '%s' matched no test that passes on rxe0 and not on vfab0: "
                        "remove it from tests/lab/pyverbs_exceptions\n", x.pattern.c_str());

    for (const SuiteRun* r : {&rxe, &vfab}) {
        EXPECT_TRUE(r->trouble.empty()) << r->device << ": " << r->trouble;
        // Any module the guest's Python lacks (lab.d/pyverbs.sh copies only what the suite imports).
        EXPECT_EQ(r->log.find("No module named"), std::string::npos)
            << r->device << ": a module is missing from the guest (scripts/lab.d/pyverbs-modules.py)";
        if (raw || HasFailure())
            std::printf("@@pyverbs-log begin %s\n%s@@pyverbs-log end %s\n", r->device.c_str(), r->log.c_str(),
                        r->device.c_str());
    }
    EXPECT_GT(ca.count("ok") ? ca.at("ok") : 0, 50) << "rxe0 passed too few of the suite's tests to compare with";
    std::string list;
    for (const std::string& id : regressions) list += "  " + id + ": " + vfab.verdicts.at(id).status + " " + vfab.verdicts.at(id).reason + "\n";
    EXPECT_TRUE(regressions.empty()) << regressions.size()
                                     << " tests pass on rxe0 and not on vfab0 (tests/lab/pyverbs_exceptions lists the known ones):\n"
                                     << list;
}

}  // namespace
}  // namespace vfab::lab
