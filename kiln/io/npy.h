// NumPy .npy files (format 1.0-3.0, little-endian float32/float64/int64/int32/bool, C order)
// and .npz archives of them (stored, not compressed), the exchange format of kiln-run.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// Parses a .npy image. The header is checked field by field and the data size against the
/// shape before anything is allocated; anything else (big-endian, Fortran order, other dtypes,
/// a truncated or oversized file) raises kiln::Error ("[read_npy] ...").
Tensor parse_npy(const void* data, size_t size, const std::string& what = "npy");
Tensor read_npy(const std::string& path);
/// The .npy image of a concrete tensor (format 1.0).
std::string npy_bytes(const Tensor& t);
void write_npy(const std::string& path, const Tensor& t);
/// Writes an uncompressed .npz (a zip of <name>.npy entries), as numpy.savez does.
void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& ts);

}  // namespace kiln::io
