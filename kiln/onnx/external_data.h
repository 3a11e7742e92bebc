// External weights: a model's initializers kept in a safetensors file beside the .onnx file,
// each TensorProto pointing at its bytes with ONNX's own external-data fields (location, offset,
// length), so that onnxruntime and onnx.load read the same file. Internal to libkiln_onnx.
#pragma once
#include <cstdint>
#include <string>

#include "onnx/onnx_pb.h"

namespace kiln::onnx::detail {

/// Moves the main-graph initializers of `m` holding at least `min_bytes` of raw data into the
/// safetensors file `file` (relative, no "..") in the directory of `model_path`; each one then
/// points at its bytes there (data_location EXTERNAL). The file is written to a temporary name
/// and renamed, so a failed save leaves no partial file.
void write_external_data(::onnx::ModelProto& m, const std::string& model_path,
                         const std::string& file, int64_t min_bytes, const char* op);

/// Reads every EXTERNAL main-graph initializer of `m` back into raw data. The location must be
/// a relative path to a regular file inside the directory of `model_path` (no absolute path, no
/// "..", no symlink leading out); offset and length must lie inside the file and equal what the
/// tensor's dims and dtype need; for a .safetensors file the header entry of the same name must
/// agree on dtype and shape, the offset must lie in its data section and the bytes there must be
/// the entry's. All of it is checked before a tensor's bytes are allocated; anything else
/// raises kiln::Error "[op] ...". `model_path` empty (a model from bytes): external data is
/// refused, naming the initializer.
void read_external_data(::onnx::ModelProto& m, const std::string& model_path, const char* op);

}  // namespace kiln::onnx::detail
