// The log hook (vfab/log.hpp, vfab_set_log_handler in vfab.h): nothing is written anywhere until
// the application installs a handler; a handler gets the messages at its level or more severe,
// on the calling thread; the C handler gets the same; a handler may replace itself.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "vfab/log.hpp"
#include "vfab/vfab.h"

namespace vfab {
namespace {

struct Seen {
    std::vector<std::pair<int, std::string>> messages;
};

void record(LogLevel l, const char* m, void* u) { static_cast<Seen*>(u)->messages.emplace_back(int(l), m); }
void record_c(int l, const char* m, void* u) { static_cast<Seen*>(u)->messages.emplace_back(l, m); }

// What fd 2 received while `f` ran.
template <class F>
std::string stderr_of(F f) {
    std::fflush(stderr);
    int pipefd[2];
    EXPECT_EQ(pipe(pipefd), 0);
    const int saved = dup(2);
    dup2(pipefd[1], 2);
    close(pipefd[1]);
    f();
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string out;
    char buf[512];
    for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
    close(pipefd[0]);
    return out;
}

TEST(Log, WithoutAHandlerNothingIsWritten) {
    set_log_handler(nullptr);
    EXPECT_FALSE(log_enabled(LogLevel::error));
    EXPECT_EQ(stderr_of([] { log(LogLevel::error, "unmapping IOVA 0x1000 failed"); }), "");
}

TEST(Log, AHandlerGetsItsLevelAndMoreSevere) {
    Seen seen;
    set_log_handler(record, &seen, LogLevel::warning);
    EXPECT_TRUE(log_enabled(LogLevel::warning));
    EXPECT_FALSE(log_enabled(LogLevel::info));
    log(LogLevel::error, "e");
    log(LogLevel::warning, "w");
    log(LogLevel::info, "i");
    log(LogLevel::debug, "d");
    set_log_handler(nullptr);
    log(LogLevel::error, "after");
    ASSERT_EQ(seen.messages.size(), 2u);
    EXPECT_EQ(seen.messages[0], std::make_pair(int(LogLevel::error), std::string("e")));
    EXPECT_EQ(seen.messages[1], std::make_pair(int(LogLevel::warning), std::string("w")));
}

TEST(Log, TheStderrHandlerWritesOneLinePerMessage) {
    set_log_handler(log_to_stderr, nullptr, LogLevel::warning);
    const std::string out = stderr_of([] {
        log(LogLevel::warning, "no-IOMMU mode");
        log(LogLevel::info, "not this one");
    });
    set_log_handler(nullptr);
    EXPECT_EQ(out, "vfab: warning: no-IOMMU mode\n");
}

TEST(Log, TheCApiInstallsItsOwnHandler) {
    Seen seen;
    vfab_set_log_handler(record_c, &seen, VFAB_LOG_INFO);
    log(LogLevel::info, "from C");
    log(LogLevel::debug, "filtered");
    vfab_set_log_handler(nullptr, nullptr, VFAB_LOG_ERROR);
    log(LogLevel::error, "after");
    ASSERT_EQ(seen.messages.size(), 1u);
    EXPECT_EQ(seen.messages[0], std::make_pair(int(VFAB_LOG_INFO), std::string("from C")));
}

// A handler may install another one (it is called outside vfab's lock).
TEST(Log, AHandlerMayReplaceItself) {
    static Seen seen;
    seen.messages.clear();
    set_log_handler([](LogLevel l, const char* m, void* u) {
        record(l, m, u);
        set_log_handler(nullptr);
    }, &seen, LogLevel::debug);
    log(LogLevel::info, "first");
    log(LogLevel::info, "second");
    EXPECT_EQ(seen.messages.size(), 1u);
}

}  // namespace
}  // namespace vfab
