// lab-sriov: the SR-IOV set-up of sriov_vf.hpp as a command, for a test that needs it on the
// other machine of a two-machine lab too (hpc_test, through lab-rsh):
//   lab-sriov up N   the kernel's igb takes 00:0a.0, brings it up (no address: it only carries
//                    its VFs' traffic) and makes N VFs for vfio-pci; prints their PCI addresses,
//                    one per line. Whatever went wrong is undone before it says so (exit 1).
//   lab-sriov down   the VFs gone and the PF back on vfio-pci, whatever part was done.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sriov_vf.hpp"

int main(int argc, char** argv) {
    using vfab::lab::SriovVf;
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "down" && argc == 2) {
        SriovVf env;
        if (const std::string e = env.restore(); !e.empty()) {
            std::fprintf(stderr, "lab-sriov down: %s\n", e.c_str());
            return 1;
        }
        return 0;
    }
    const int n = argc == 3 ? std::atoi(argv[2]) : 0;
    if (cmd != "up" || n < 1 || n > 7) {
        std::fprintf(stderr, "usage: lab-sriov up N (1..7) | lab-sriov down\n");
        return 2;
    }
    SriovVf env;   // undoes everything on the way out unless kept
    std::string e = env.create(unsigned(n));
    if (e.empty()) e = env.pf().bring_up(std::chrono::seconds(10));
    if (!e.empty()) {
        std::fprintf(stderr, "lab-sriov up %d: %s\n", n, e.c_str());
        return 1;
    }
    env.keep();
    for (const std::string& vf : env.vfs()) std::printf("%s\n", vf.c_str());
    return 0;
}
