// The providers built into libvfab: one line each.
#include "api/providers/e1000e.hpp"
#include "api/providers/igb.hpp"
#include "api/providers/igbvf.hpp"
#include "api/providers/virtio_net.hpp"
#include "vfab/provider.hpp"

namespace vfab::provider {
namespace {

constexpr Record kBuiltin[] = {
    providers::kE1000eRecord,
    providers::kVirtioNetRecord,
    providers::kIgbRecord,
    providers::kIgbvfRecord,
};

}  // namespace

std::span<const Record> builtin_providers() { return kBuiltin; }

}  // namespace vfab::provider
