// Lab self-test: stops guest-init's heartbeat, as a guest whose vCPUs all went to sleep for
// good would, then waits forever.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

int main() {
    int pid = 0;
    std::ifstream("/run/vfab-heartbeat.pid") >> pid;
    if (pid <= 0 || ::kill(pid, SIGKILL) != 0) {
        std::printf("freeze: no heartbeat to stop (/run/vfab-heartbeat.pid)\n");
        return 1;
    }
    std::printf("freeze: heartbeat %d stopped\n", pid);
    std::fflush(stdout);
    for (;;) pause();
}
