// Provider plugins the registry must refuse, one kind per build (BROKEN_NAME is what the record
// registers): BROKEN_NO_ENTRY exports no entry point, BROKEN_ABI claims the next ABI version,
// BROKEN_LAYOUT another layout fingerprint; BROKEN_CXX_ABI is compiled with libstdc++'s old
// std::string (_GLIBCXX_USE_CXX11_ABI=0, as some distributions' toolchains still build); a
// record whose name is not the file's is built with BROKEN_NAME "other" into
// libvfab-misnamed.so.
#include "vfab/provider.hpp"

namespace {
using namespace vfab;

Result<std::unique_ptr<vfab::Device>> open_nothing(const PciAddress&, const OpenOptions&) {
    return Error{ENODEV, "a broken test plugin opens nothing"};
}

constexpr provider::PciId kIds[] = {{0x1234, 0xbad0}};

constexpr provider::Record make() {
    provider::Record r{provider::kAbiVersion, provider::kLayout, provider::kCxxAbi, BROKEN_NAME, kIds, 1, &open_nothing};
#ifdef BROKEN_ABI
    r.abi_version += 1;
#endif
#ifdef BROKEN_LAYOUT
    r.layout ^= 1;
#endif
    return r;
}

[[maybe_unused]] constexpr provider::Record kRecord = make();

}  // namespace

#ifndef BROKEN_NO_ENTRY
VFAB_PROVIDER_PLUGIN(kRecord)
#endif
