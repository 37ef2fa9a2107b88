// Lab self-test: prints what a guest kernel prints when a vCPU stalls, then waits forever.
#include <unistd.h>

#include <cstdio>

int main() {
    for (int i = 0; i < 3; ++i)
        std::printf("[  99.0] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n");
    std::fflush(stdout);
    for (;;) pause();
}
