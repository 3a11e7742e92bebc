// safetensors checkpoints (the Hugging Face format): an 8-byte little-endian header length N,
// N bytes of JSON naming each tensor's dtype, shape and byte range, then the raw data.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

/// Named tensors in file order (the order their entries appear in the JSON header).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Everything a safetensors file holds.
struct SafetensorsFile {
  NamedTensors tensors;                         ///< in header order
  std::map<std::string, std::string> metadata;  ///< the "__metadata__" entry (string values)
};

/// Writes `tensors` (concrete; any strides: non-contiguous views are copied) to `path` in the
/// safetensors format, in the given order, with dtypes F32, F64, I64, I32 and BOOL. The header
/// is padded with spaces to a multiple of 8 bytes, as the reference writer does. The file is
/// written to "<path>.tmp.<pid>", flushed to disk, then renamed over `path`, so a crash never
/// leaves a partial file at `path`. Names must be unique and not "__metadata__". Raises
/// kiln::Error (naming the file) on bad input or an I/O failure; `path` is then unchanged.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file: tensors in header order plus the metadata. Every check happens
/// before any tensor is returned: a truncated file, a bad header length, malformed JSON, a
/// missing or unknown field, an unsupported dtype (only F32, F64, I64, I32, BOOL), a shape
/// whose byte count differs from its data_offsets, offsets out of the data section or
/// overlapping, and duplicate names each raise kiln::Error naming the file and the problem.
/// BOOL bytes other than 0 read as true.
SafetensorsFile read_safetensors(const std::string& path);

/// read_safetensors(path).tensors.
NamedTensors load_safetensors(const std::string& path);

}  // namespace kiln::io
