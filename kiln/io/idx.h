// IDX files (the MNIST / Fashion-MNIST format), optionally gzip-compressed, read with zlib.
#pragma once
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// Reads an IDX file (".gz" or plain). unsigned-byte data comes back as int64 for 1-D files
/// (labels) and as float32 scaled to [0, 1] otherwise (images) unless `raw` is set, in which
/// case every file is returned as int64. A truncated or malformed file raises kiln::Error.
Tensor read_idx(const std::string& path, bool raw = false);

/// Fashion-MNIST from Debian's dataset-fashion-mnist package.
struct FashionMnist {
  Tensor train_images;  ///< float32 [60000, 784] in [0, 1]
  Tensor train_labels;  ///< int64 [60000]
  Tensor test_images;   ///< float32 [10000, 784]
  Tensor test_labels;   ///< int64 [10000]
};
/// Loads the four files from `dir` (default /usr/share/datasets/fashion-mnist).
FashionMnist load_fashion_mnist(const std::string& dir = "/usr/share/datasets/fashion-mnist");

}  // namespace kiln::io
