// Opens oneDNN and OpenBLAS on first use (see lazy_lib.h): ~11 ms of process start-up, their
// symbol relocations, are paid only by processes that call them.
#include "kiln/kernels/cpu/lazy_lib.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "kiln/core/error.h"

namespace kiln {

void* lazy_symbol(const char* soname, const char* symbol) {
  static std::mutex mu;
  static std::unordered_map<std::string, void*> libs;
  void* lib = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    void*& h = libs[soname];
    // RTLD_LOCAL: the library's symbols stay out of the global scope, so they never interpose
    // on another copy of it that the process (a Python program that also imports PyTorch, say)
    // has loaded.
    if (!h) h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      fail("lazy_lib", "cannot load ", soname, " (needed for ", symbol,
           "): ", why ? why : "unknown error");
    }
    lib = h;
  }
  dlerror();
  void* p = dlsym(lib, symbol);
  if (!p) {
    const char* why = dlerror();
    fail("lazy_lib", soname, " has no symbol ", symbol, ": ", why ? why : "null address");
  }
  return p;
}

}  // namespace kiln
