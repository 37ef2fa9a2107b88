#!/bin/bash
# check_symbols.sh LIBVFAB PLUGIN: the exported (dynamic, defined) symbols of libvfab.so all
# carry the version VFAB_1.0 and belong to the public API — the C API, vfab::Device::open, the
# provider registry, PciAddress, the dma:: classes and the IOMMU context — with no driver,
# VFIO-device, registry-internal, weak or std:: symbol among them; a provider plugin exports
# its entry point only.
set -uo pipefail
lib=$1 plugin=$2
fail=0
bad() { echo "FAIL: $*"; fail=1; }

public='^(vfab_[a-z0-9_]+$|vfab::Device::open\(|vfab::rdma::(Port::create\(|to_string\(|Gid::|(format_endpoint|parse_endpoint|gid_to_string|exchange_as_client|exchange_as_server)\b)|vfab::provider::(builtin_providers|provider_dir|list_providers|find_provider|load_plugin|kDefaultProviderDir)|vfab::(set_log_handler|log_to_stderr|log_level_name|log_enabled|log)\(|vfab::PciAddress::|vfab::dma::([A-Za-z_]+::)*(~?[A-Za-z_]+|operator[^ (]+)(\[abi:cxx11\])?\(|vfab::vfio::IommuContext::|vfab::vfio::(to_string\(vfab::vfio::IommuBackend\)$|parse_iommu_backend\(|iommu_backend_from_env\(|memlock_limit_text))'
internal='vfab::e1000e|vfab::rdma::detail|vfab::providers|vfab::capi|Adapter|vfab::vfio::(Device|Interrupts|Region|EventWaiter|PciSysfs|Sys)\b|^std::|anonymous namespace'

mapfile -t lines < <(nm -D --defined-only "$lib")
(( ${#lines[@]} > 20 )) || bad "$lib exports only ${#lines[@]} symbols"
exported=0 c_api=0
for line in "${lines[@]}"; do
    read -r _ type sym <<< "$line"
    if [[ $type == A ]]; then
        [[ $sym == VFAB_1.0 ]] || bad "unexpected version node $sym"
        continue
    fi
    name=${sym%@@*}
    version=${sym#"$name"}
    demangled=$(c++filt "$name")
    [[ $version == @@VFAB_1.0 ]] || bad "$demangled has version '${version:-none}', not @@VFAB_1.0"
    [[ $type =~ ^[TDBR]$ ]] || bad "$demangled is exported as '$type' (weak or unusual): inline code must stay local"
    [[ $demangled =~ $public ]] || bad "$demangled is not in the public API"
    [[ ${demangled%%(*} =~ $internal ]] && bad "$demangled is internal"
    [[ $demangled == vfab_* ]] && c_api=$((c_api + 1))
    exported=$((exported + 1))
done
all=$(nm -D --defined-only "$lib" | c++filt)
for must in vfab_open vfab_poll_cq vfab_post_send vfab_last_error \
            'vfab::Device::open(' 'vfab::dma::ProtectionDomain::register_memory(' 'vfab::provider::find_provider(' 'vfab::set_log_handler(' vfab_set_log_handler; do
    [[ $all == *"$must"* ]] || bad "$must is not exported"
done

mapfile -t plugin_syms < <(nm -D --defined-only "$plugin" | awk '$2 != "A" {print $3}')
[[ ${plugin_syms[*]} == "vfab_provider_entry_v1@@VFAB_PROVIDER_1" ]] \
    || bad "$plugin exports ${plugin_syms[*]}, not just vfab_provider_entry_v1"

echo "$lib: $exported exported symbols ($c_api of the C API), all @@VFAB_1.0 and public"
exit $fail
