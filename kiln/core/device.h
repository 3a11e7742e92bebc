// Device: where a tensor's storage lives. Kiln runs on the CPU today; the type is in the core so
// that a CUDA backend slots in beside it without changing user code (kiln.device, Tensor.to).
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = -1;  ///< -1: the current device of that type

  static Device cpu() { return Device{}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  /// "cpu", "cuda", "cuda:1" (torch.device's spelling).
  std::string str() const;
  bool operator==(const Device&) const = default;
};

/// Parses "cpu", "cuda" or "cuda:N"; anything else is a kiln::Error naming `op`.
Device parse_device(const std::string& s, const char* op = "device");
/// Whether this build has a backend for `d`: the CPU only, today.
bool device_available(const Device& d);
/// Raises naming `op` when `d` has no backend in this build.
void check_device(const Device& d, const char* op);

}  // namespace kiln
