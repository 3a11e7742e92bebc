// Device names, parsing and the backends this build has (the CPU).
#include "kiln/core/device.h"

#include <cstdlib>

#include "kiln/core/error.h"

namespace kiln {

std::string Device::str() const {
  std::string s(type == DeviceType::CPU ? "cpu" : "cuda");
  if (index >= 0) {
    s.push_back(':');
    s.append(std::to_string(index));
  }
  return s;
}

Device parse_device(const std::string& s, const char* op) {
  Device d;
  const size_t colon = s.find(':');
  const std::string name = s.substr(0, colon);
  if (name == "cpu") {
    d.type = DeviceType::CPU;
  } else if (name == "cuda") {
    d.type = DeviceType::CUDA;
  } else {
    fail(op, "expected a device 'cpu', 'cuda' or 'cuda:N', got '", s, "'");
  }
  if (colon != std::string::npos) {
    const std::string idx = s.substr(colon + 1);
    char* end = nullptr;
    const long v = idx.empty() ? -1 : std::strtol(idx.c_str(), &end, 10);
    if (idx.empty() || *end != '\0' || v < 0 || v > 1 << 16)
      fail(op, "bad device index in '", s, "' (expected a small non-negative integer)");
    d.index = static_cast<int>(v);
  }
  return d;
}

bool device_available(const Device& d) { return d.type == DeviceType::CPU && d.index <= 0; }

void check_device(const Device& d, const char* op) {
  if (!device_available(d))
    fail(op, "device '", d.str(),
         "' is not available: this build of Kiln has the CPU backend "
         "only (tensors live on the CPU)");
}

}  // namespace kiln
