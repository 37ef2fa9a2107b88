// How vfio-devctl shows things: tables for people, JSON (nlohmann) for scripts.
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <vector>

#include "devctl_check.hpp"
#include "devctl_devices.hpp"
#include "devctl_hugepages.hpp"
#include "devctl_vfio_info.hpp"

namespace vfab::devctl {

nlohmann::json device_json(const DeviceInfo& info);
void print_device_table(std::ostream& out, const std::vector<DeviceInfo>& devices);

// show: the device, the backend vfab would use and, when it could be read, what VFIO reports.
nlohmann::json show_json(const DeviceInfo& info, const Backend& backend, const Result<VfioInfo>* vfio);
void print_show(std::ostream& out, const DeviceInfo& info, const Backend& backend, const Result<VfioInfo>* vfio);

nlohmann::json check_json(const CheckReport& report);
void print_check(std::ostream& out, const CheckReport& report);

nlohmann::json hugepages_json(const std::vector<HugepagePool>& pools);
void print_hugepages(std::ostream& out, const std::vector<HugepagePool>& pools);

// JSON text that never throws (invalid UTF-8 in a name is replaced).
std::string dump(const nlohmann::json& j);

}  // namespace vfab::devctl
