// Whole-file reads for the loaders (.npy, ONNX models, saved graphs and jit versions): the file
// mapped read-only with every page populated in one call. Reading a 46 MB ONNX file through a
// stringstream took ~360 ms here, almost all of it page faults and zeroing of fresh buffers;
// mapping it takes ~20 ms.
#pragma once
#include <cstddef>
#include <string>

namespace kiln::io {

/// A regular file's bytes, mapped private and read-only for as long as the object lives. The
/// loaders parse and copy out of it at once, so a file truncated by another process in that
/// window is the one way to a SIGBUS; its contents are treated as hostile as always.
class MappedFile {
 public:
  /// Anything but a readable regular file (missing, a directory, a FIFO that would block, a
  /// device such as /dev/zero that would be read until memory runs out) raises kiln::Error
  /// "[op] ...".
  MappedFile(const std::string& path, const char* op);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return static_cast<const char*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln::io
