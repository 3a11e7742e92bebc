// libFuzzer targets for the file loaders that take a path: safetensors, IDX (gzip or raw) and
// .npy. The input goes to a file in a private temp directory (/dev/shm when present), then to
// the loader chosen at build time by KILN_FUZZ_LOADER.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "kiln/io/idx.h"
#include "kiln/io/npy.h"
#include "kiln/io/safetensors.h"

namespace {
std::string temp_path() {
  static const std::string p = [] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/kiln_fuzz_" + std::to_string(getpid());
  }();
  return p;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#if KILN_FUZZ_LOADER == 3
  try {
    kiln::io::parse_npy(data, size);
  } catch (const kiln::Error&) {
  }
  return 0;
#endif
  const std::string path = temp_path();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
#if KILN_FUZZ_LOADER == 1
    kiln::io::read_safetensors(path);
#elif KILN_FUZZ_LOADER == 2
    kiln::io::read_idx(path);
#endif
  } catch (const kiln::Error&) {
  }
  return 0;
}
