// The command line of vfio-devctl (CLI11): parses, runs one subcommand, prints its result.
#pragma once

#include <ostream>

namespace vfab::devctl {

// Exit status: 0 done; 1 the command failed or check found a blocker; 2 bad usage.
// Every failure is one line "vfio-devctl: ..." on `err`.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace vfab::devctl
