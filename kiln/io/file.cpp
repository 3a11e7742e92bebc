// MappedFile (see file.h): fstat for the size and kind, then mmap with MAP_POPULATE.
#include "kiln/io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/core/error.h"

namespace kiln::io {

MappedFile::MappedFile(const std::string& path, const char* op) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever; it is
  // then refused as not a regular file like any other non-file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(op, "cannot open '", path, "': ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    fail(op, "cannot read the size of '", path, "': ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail(op, "'", path, "' is not a regular file",
         S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // mmap refuses length 0; data() is null, size() 0
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED)
    fail(op, "cannot map '", path, "' (", size_, " bytes): ", std::strerror(errno));
  data_ = p;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace kiln::io
