// Tensor: a strided view of a Storage, or a symbolic name for a value in a graph being built or
// traced. Methods that are ops (views, arithmetic, casts) are declared here and defined in
// kiln/ops, so that they go through the one dispatcher (as ATen does with TensorBody.h).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <source_location>
#include <string>
#include <vector>

#include "kiln/core/allocator.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/scalar.h"
#include "kiln/core/shape.h"

namespace kiln {

/// The autograd node that produced a tensor (Tensor::grad_fn()). Opaque here: its members are
/// in kiln/autograd/grad_node.h, for the autograd engine and extensions.
struct GradNode;
/// What a symbolic tensor names: one output of one node of a graph (TensorImpl::sym). Opaque
/// here: its members are in kiln/graph/node.h.
struct SymbolicValue;
class Tensor;

/// A reference-counted byte buffer from the caching allocator (or an external buffer).
class Storage {
 public:
  explicit Storage(size_t nbytes);
  /// Wraps external memory; `deleter` (may be null) runs when the last tensor lets go.
  Storage(void* data, size_t nbytes, void (*deleter)(void*, void*), void* ctx);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  /// Bumped by every in-place write through any view of this storage; autograd compares it with
  /// the value saved at record time (PyTorch's version counter, shared by all views).
  uint32_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  size_t capacity_ = 0;
  void (*deleter_)(void*, void*) = nullptr;
  void* ctx_ = nullptr;
  uint32_t version_ = 0;
};

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<struct TensorImpl> grad;
  std::shared_ptr<GradNode> grad_fn;
  uint32_t output_nr = 0;
};

struct TensorImpl {
  // User-provided, so that allocate_shared's value-initialization runs the member initializers
  // instead of first zeroing the whole object (a 200-byte memset per op output).
  TensorImpl() {}
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = Float32;
  bool contiguous = true;
  /// A dead value (eager control flow): the untaken side of a switch_, or the result of an op
  /// with a dead input. It has a dtype and a shape (so inference and shape checks still run on
  /// it) but no storage and no symbolic value. See Tensor::is_dead().
  bool dead = false;
  /// Version of the data (shared by every view of the storage; 0 for symbolic tensors).
  uint32_t version() const { return storage ? storage->version() : 0; }
  std::unique_ptr<AutogradMeta> autograd;
  std::shared_ptr<SymbolicValue> sym;  // set for symbolic tensors
  /// For an eager view made by a differentiable view op (slice, select, transpose, ...): the
  /// tensor it ultimately views (never itself a view), and the storage version when the view's
  /// autograd identity was last set. In-place writes through the view give the base a new
  /// history (torch's CopySlices); a view whose storage changed since then takes a fresh
  /// identity from its base when it next enters a recorded op (kiln/autograd/engine.cpp).
  std::shared_ptr<TensorImpl> view_base;
  uint32_t view_version = 0;
  /// Dims (bit d: dim d < 32) kiln::mark_dynamic / mark_static set for the JIT's guards: a
  /// marked-dynamic dim is dynamic from a jitted function's first version; a marked-static one
  /// is never made dynamic (every size its own version).
  uint32_t dynamic_marks = 0, static_marks = 0;
  void recompute_contiguous();
};

/// A fresh TensorImpl / Storage whose shared_ptr control block comes from the per-thread block
/// pool (kiln/core/block_pool.h): what every op output is built from.
std::shared_ptr<TensorImpl> make_tensor_impl();
std::shared_ptr<Storage> make_storage(size_t nbytes);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl_or_raise("dtype").dtype; }
  const Shape& shape() const { return impl_or_raise("shape").shape; }
  int64_t dim() const { return impl_or_raise("dim").shape.rank(); }
  /// Size of dim d (negative counts from the end).
  int64_t size(int64_t d) const;
  const Strides& strides() const { return impl_or_raise("strides").strides; }
  int64_t stride(int64_t d) const;
  int64_t offset() const { return impl_or_raise("offset").offset; }
  int64_t numel() const { return impl_or_raise("numel").shape.numel(); }
  bool is_contiguous() const { return impl_or_raise("is_contiguous").contiguous; }
  bool is_symbolic() const { return impl_ && impl_->sym != nullptr; }
  bool is_concrete() const { return impl_ && impl_->storage != nullptr; }
  /// Dead (TensorFlow's executor deadness, eagerly): a value on the untaken side of a switch_.
  /// Unlike an undefined tensor it is a valid op input: an eager op with a dead input runs no
  /// kernel and returns dead outputs (checked and shaped by the op's inference), merge forwards
  /// its live input, autograd treats a dead gradient as none. Host reads of it raise.
  bool is_dead() const { return impl_ && impl_->dead; }
  size_t element_size() const { return dtype_size(impl_or_raise("element_size").dtype); }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  /// Whether the two tensors share a storage.
  bool shares_storage(const Tensor& o) const;

  /// Typed pointer to element 0 of this view (checks the dtype).
  template <typename T>
  T* data_ptr() const {
    check_concrete("data_ptr");
    if (dtype_of<T>::value != impl_->dtype)
      fail("data_ptr", "tensor has dtype ", impl_->dtype, " (shape ", impl_->shape, "), requested ",
           dtype_name(dtype_of<T>::value));
    return static_cast<T*>(impl_->storage->data()) + impl_->offset;
  }
  void* raw_data() const {
    check_concrete("raw_data");
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * element_size();
  }

  // ---- host reads ----------------------------------------------------------------------
  /// The single element as T (converting). A symbolic tensor raises in a graph and breaks the
  /// graph under jit.
  template <typename T>
  T item(const std::source_location& loc = std::source_location::current()) const;
  /// All elements in row-major order as T (converting).
  template <typename T>
  std::vector<T> to_vector(const std::source_location& loc = std::source_location::current()) const;
  /// Truth value of a one-element tensor. A conversion cannot take the caller's
  /// source_location, so a graph break here names the calling function (and its binary); use
  /// item<bool>() to have it name the source line.
  explicit operator bool() const;
  /// The host read behind item(), to_vector() and bool, for callers whose call site C++ cannot
  /// see (a Python binding passes the Python `file:line`): this tensor when it is concrete;
  /// else what a read gives (in a graph an error, under jit a graph break that returns the
  /// concrete value) with `where` as the call site that errors and explain() name, and `what`
  /// as the read ("item", "bool").
  Tensor host_value(const char* what, const std::string& where) const;
  /// Element at a multi-index, as double (for tests and printing).
  double at(std::initializer_list<int64_t> idx) const;

  // ---- autograd ------------------------------------------------------------------------
  bool requires_grad() const { return impl_ && impl_->autograd && impl_->autograd->requires_grad; }
  /// Marks a leaf as requiring grad (floating dtypes only). Returns *this.
  Tensor& requires_grad_(bool on = true);
  /// Accumulated gradient (undefined until backward reaches this leaf).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  /// Drops the accumulated gradient.
  void zero_grad() const;
  /// Keep .grad() for this non-leaf during backward.
  void retain_grad() const;
  bool is_leaf() const;
  const std::shared_ptr<GradNode>& grad_fn() const;
  /// Backpropagates from this tensor. Non-scalars need an explicit `gradient`.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  /// Same data, cut from the autograd graph.
  Tensor detach() const;

  // ---- views and copies (ops; defined in kiln/ops) --------------------------------------
  Tensor reshape(const Shape& s) const;
  Tensor view(const Shape& s) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  /// Transpose of a 2-D tensor.
  Tensor t() const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  /// Elements start, start+step, ... < end along dim (negative indices count from the end).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// Selects index i along dim, removing the dim.
  Tensor select(int64_t dim, int64_t i) const;
  Tensor expand(const Shape& s) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType t) const;
  /// Where the storage lives: the CPU, the one backend today (core/device.h).
  Device device() const { return Device::cpu(); }
  /// This tensor on device `d`: itself for the CPU; a device without a backend raises.
  Tensor to(const Device& d) const;
  /// Copies src (broadcast to this shape, cast to this dtype) into this tensor in place.
  Tensor& copy_(const Tensor& src);
  /// Fills this tensor in place.
  Tensor& fill_(double v);
  /// In-place arithmetic (torch's add_, mul_, ...): the result of the out-of-place op, which must
  /// have this tensor's shape (`other` broadcasts to it) and a dtype castable to this one's
  /// (an integer tensor cannot take a float result), written into this tensor's storage, which
  /// every view of it sees. With autograd it continues the tensor's history as torch does
  /// (refused for a leaf that requires grad and for storage shared with views recorded for
  /// autograd). Eager only: in a graph or a jitted function write `x = add(x, y)`. Contiguous
  /// tensors are computed into directly when no gradient is recorded.
  Tensor& add_(const Tensor& other);
  Tensor& add_(const Scalar& other);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(const Scalar& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(const Scalar& other);
  Tensor& neg_();
  Tensor& clamp_(double lo, double hi);
  Tensor& relu_();
  /// Fills this tensor with zeros in place (fill_(0)).
  Tensor& zero_();

  // ---- reductions as methods (ops) -----------------------------------------------------
  Tensor sum() const;
  Tensor mean() const;

 private:
  void check_concrete(const char* what) const {
    if (!impl_ || !impl_->storage) [[unlikely]]
      not_concrete(what);
  }
  [[noreturn]] void not_concrete(const char* what) const;
  // Metadata of a defined tensor; an undefined one (default-constructed, or an absent gradient)
  // raises kiln::Error instead of dereferencing null.
  const TensorImpl& impl_or_raise(const char* what) const {
    if (!impl_) [[unlikely]]
      undefined(what);
    return *impl_;
  }
  [[noreturn]] static void undefined(const char* what);
  Tensor host_value(const char* what, const std::source_location& loc) const;
  /// host_value for operators, which cannot take a source_location: `ret` is the operator's
  /// return address, and the caller it falls in is named.
  Tensor host_value_from(const char* what, const void* ret) const;
  friend std::ostream& operator<<(std::ostream& os, const Tensor& t);
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- construction (concrete tensors) --------------------------------------------------
/// Uninitialized tensor from the caching allocator.
Tensor empty(const Shape& shape, DType dtype = Float32);
Tensor zeros(const Shape& shape, DType dtype = Float32);
Tensor ones(const Shape& shape, DType dtype = Float32);
Tensor full(const Shape& shape, double value, DType dtype = Float32);
/// 0-d tensor.
Tensor scalar_tensor(double value, DType dtype = Float32);
/// A concrete copy of t converted to dtype, without dispatch or autograd (factories and the
/// reduced-dtype compute path use it; kiln::cast is the op).
Tensor cast_to(const Tensor& t, DType dtype);
/// A dead value of this shape and dtype (no storage): what switch_ returns eagerly on its
/// untaken side.
Tensor dead_tensor(const Shape& shape, DType dtype = Float32);
/// Same shape and dtype as t (ops: on a symbolic tensor they add a fill node, so dynamic dims
/// work; defined in kiln/ops).
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double v);
Tensor empty_like(const Tensor& t);
/// [start, end) by step; int64 when all are integral-valued and dtype not given.
Tensor arange(double end);
Tensor arange(double start, double end, double step = 1.0, DType dtype = Int64);
Tensor linspace(double start, double end, int64_t steps, DType dtype = Float32);
Tensor eye(int64_t n, int64_t m = -1, DType dtype = Float32);
/// From host data; the shape defaults to 1-D.
Tensor tensor(const std::vector<float>& v, const Shape& shape = {});
Tensor tensor(const std::vector<double>& v, const Shape& shape = {});
Tensor tensor(const std::vector<int64_t>& v, const Shape& shape = {});
Tensor tensor(const std::vector<int32_t>& v, const Shape& shape = {});
Tensor tensor(const std::vector<bool>& v, const Shape& shape = {});
Tensor tensor(std::initializer_list<float> v, const Shape& shape = {});
/// Wraps an existing view: shares storage, new shape/strides/offset. Not an op; no autograd.
Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset);
/// Copy of any concrete tensor into a new contiguous buffer (raw; no autograd, no dispatch).
Tensor raw_contiguous_copy(const Tensor& t);

// ---- random -----------------------------------------------------------------------------
/// Seeds the global generator (rand, randn, randint, dropout).
void manual_seed(uint64_t seed);
/// The global generator's whole state (torch.get_rng_state / set_rng_state): a compiled
/// backward that recomputes a forward with random ops replays the draws the forward made.
std::vector<uint64_t> get_rng_state();
/// Raises kiln::Error unless `state` came from get_rng_state (4 words, not all zero).
void set_rng_state(const std::vector<uint64_t>& state);
/// Uniform [0, 1).
Tensor rand(const Shape& shape, DType dtype = Float32);
/// Standard normal.
Tensor randn(const Shape& shape, DType dtype = Float32);
/// Uniform integers in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = Int64);
/// Next 64 random bits of the global generator (for kernels such as dropout).
uint64_t random_u64();

}  // namespace kiln
