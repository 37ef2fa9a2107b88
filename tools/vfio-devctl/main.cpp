// vfio-devctl: prepares a host and its PCI devices for vfab. docs/vfio-devctl.md.
#include <exception>
#include <iostream>

#include "devctl_cli.hpp"
#include "vfab/log.hpp"

int main(int argc, char** argv) {
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);   // vfab's warnings on stderr
    try {
        return vfab::devctl::run_cli(argc, argv, std::cout, std::cerr);
    } catch (const std::exception& e) {   // only out-of-memory and the like can get here
        std::cerr << "vfio-devctl: " << e.what() << "\n";
        return 1;
    }
}
