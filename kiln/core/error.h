// kiln::Error: the one exception type; messages start with "[op_name]".
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

/// Raised for every bad input and misuse. The message starts with "[op]" and names the shapes,
/// dtypes and what was expected.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// Concatenates its arguments with operator<< into a string.
template <typename... A>
std::string str_cat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

/// Throws kiln::Error("[op] ...").
template <typename... A>
[[noreturn]] void fail(const char* op, const A&... a) {
  throw Error(str_cat("[", op, "] ", a...));
}

}  // namespace kiln

#define KILN_CHECK(cond, op, ...)               \
  do {                                          \
    if (!(cond)) ::kiln::fail(op, __VA_ARGS__); \
  } while (0)
