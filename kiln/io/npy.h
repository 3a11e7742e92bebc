// NumPy .npy files (format 1.0-3.0, little-endian float32/float64/int64/int32/bool, C order)
// and .npz archives of them (stored, not compressed), the exchange format of kiln-run; uint16/
// 32/64 arrays too, held widened as the ONNX importer holds such values.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// NumPy's unsigned dtypes that Kiln (as torch 1.13) lacks. Kiln holds them widened, as the
/// ONNX importer does: uint16 as int32, uint32 as int64, uint64 as int64 bit for bit.
enum class NpyUnsigned { None, U16, U32, U64 };
const char* npy_unsigned_name(NpyUnsigned u);  ///< "uint16", "uint32", "uint64" ("" for None)

/// Parses a .npy image. The header is checked field by field and the data size against the
/// shape before anything is allocated; anything else (big-endian, Fortran order, other dtypes,
/// a truncated or oversized file) raises kiln::Error ("[read_npy] ...").
Tensor parse_npy(const void* data, size_t size, const std::string& what = "npy");
Tensor read_npy(const std::string& path);
/// As parse_npy, and also '<u2', '<u4' and '<u8' arrays, read widened; `*source` says which
/// (None for every other dtype). A uint64 value of 2^63 or more reads as a negative int64: the
/// caller decides whether to refuse it (kiln-run does, naming the input).
Tensor parse_npy_widened(const void* data, size_t size, const std::string& what,
                         NpyUnsigned* source);
Tensor read_npy_widened(const std::string& path, NpyUnsigned* source);

/// The .npy image of a concrete tensor (format 1.0).
std::string npy_bytes(const Tensor& t);
/// The .npy image of an integer tensor holding `as` values widened, written as that dtype: every
/// value must fit (uint64 takes int64's bits as they are), else "[write_npy] <what> ...".
std::string npy_bytes_unsigned(const Tensor& t, NpyUnsigned as, const std::string& what);
void write_npy(const std::string& path, const Tensor& t);
/// Writes an uncompressed .npz (a zip of <name>.npy entries), as numpy.savez does. `as`, if not
/// empty, has one entry per tensor: where not None, that tensor is written as that unsigned
/// dtype (npy_bytes_unsigned).
void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& ts,
               const std::vector<NpyUnsigned>& as = {});

}  // namespace kiln::io
