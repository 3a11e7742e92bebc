// Zero-copy exchange: the buffer protocol (np.asarray(t) shares the tensor's memory),
// kiln.from_numpy (a tensor over an array's memory, keeping the array alive) and DLPack
// (__dlpack__, __dlpack_device__, kiln.from_dlpack) as PyTorch 1.13's torch.utils.dlpack speaks it.
#include "common.h"

namespace kiln::python {
namespace {

// DLPack 0.6 ABI (dlpack.h, as PyTorch 1.13 ships it), declared here so that the build needs no
// dlpack package.
struct DLDevice {
  int32_t device_type;  // kDLCPU = 1
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBool 6 (DLPack >= 0.8)
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLCPU = 1;

// What an exported DLManagedTensor owns: the tensor (keeping its storage alive) and the arrays
// its DLTensor points into.
struct Exported {
  Tensor t;
  std::vector<int64_t> shape, strides;
  DLManagedTensor m;
};

void delete_exported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

// A capsule nobody consumed frees its tensor; a consumer renames it to "used_dltensor" first.
void capsule_destructor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

DLDataType dl_dtype(DType d) {
  switch (d) {
    case Float32:
      return {2, 32, 1};
    case Float64:
      return {2, 64, 1};
    case Int64:
      return {0, 64, 1};
    case Int32:
      return {0, 32, 1};
    case Bool:
      // PyTorch 1.13 (DLPack 0.6) has no bool code: it reads bytes of 0/1 as uint8.
      return {1, 8, 1};
    case Float16:
      return {2, 16, 1};
    case BF16:
      return {4, 16, 1};  // kDLBfloat
    case Int8:
      return {0, 8, 1};
    case UInt8:
      return {1, 8, 1};
    case Int16:
      return {0, 16, 1};
  }
  return {2, 32, 1};
}

py::capsule to_dlpack(const Tensor& t) {
  if (!t.is_concrete())
    raise(value_error_type(), "[__dlpack__] only concrete tensors can be exported");
  auto* e = new Exported;
  e->t = t.detach();
  e->shape.assign(t.shape().begin(), t.shape().end());
  e->strides.assign(t.strides().begin(), t.strides().end());
  DLTensor& d = e->m.dl_tensor;
  d.data = t.raw_data();
  d.device = {kDLCPU, 0};
  d.ndim = static_cast<int32_t>(t.dim());
  d.dtype = dl_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->m.manager_ctx = e;
  e->m.deleter = delete_exported;
  return py::capsule(&e->m, "dltensor", &capsule_destructor);
}

void release_imported(void*, void* ctx) {
  auto* m = static_cast<DLManagedTensor*>(ctx);
  // PyTorch's deleter drops a reference to its tensor, which needs the GIL.
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  if (m->deleter) m->deleter(m);
  PyGILState_Release(st);
}

Tensor from_dlpack(py::object obj) {
  py::object cap = obj;
  if (py::hasattr(obj, "__dlpack__")) cap = obj.attr("__dlpack__")();
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
    raise(type_error_type(),
          "[from_dlpack] expected an object with __dlpack__ or an unused "
          "'dltensor' capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  const DLTensor& d = m->dl_tensor;
  if (d.device.device_type != kDLCPU)
    raise(value_error_type(), str_cat("[from_dlpack] only CPU tensors are supported, got device "
                                      "type ",
                                      d.device.device_type));
  std::optional<DType> dt;
  if (d.dtype.lanes == 1) {
    if (d.dtype.code == 2 && d.dtype.bits == 32) dt = Float32;
    if (d.dtype.code == 2 && d.dtype.bits == 64) dt = Float64;
    if (d.dtype.code == 0 && d.dtype.bits == 64) dt = Int64;
    if (d.dtype.code == 0 && d.dtype.bits == 32) dt = Int32;
    if (d.dtype.code == 6 && d.dtype.bits == 8) dt = Bool;
    if (d.dtype.code == 2 && d.dtype.bits == 16) dt = Float16;
    if (d.dtype.code == 4 && d.dtype.bits == 16) dt = BF16;
    if (d.dtype.code == 0 && d.dtype.bits == 16) dt = Int16;
    if (d.dtype.code == 0 && d.dtype.bits == 8) dt = Int8;
    if (d.dtype.code == 1 && d.dtype.bits == 8) dt = UInt8;
  }
  if (!dt)
    raise(type_error_type(),
          str_cat("[from_dlpack] unsupported dtype (code ", int(d.dtype.code), ", bits ",
                  int(d.dtype.bits), ", lanes ", d.dtype.lanes,
                  "); Kiln has float32, float64, float16, bfloat16, int64, int32, "
                  "int16, int8, uint8 and bool"));
  Shape shape;
  Strides strides;
  int64_t span = 1;
  for (int i = 0; i < d.ndim; ++i) {
    shape.push_back(d.shape[i]);
    int64_t st = d.strides ? d.strides[i] : 0;
    if (st < 0) raise(value_error_type(), "[from_dlpack] negative strides are not supported");
    strides.push_back(st);
    span += (d.shape[i] - 1) * st;
  }
  if (!d.strides) strides = contiguous_strides(shape);
  int64_t numel = shape.numel();
  size_t nbytes = numel == 0 ? 0 : static_cast<size_t>(span) * dtype_size(*dt);
  // Consumed: the capsule no longer frees the tensor; the storage's deleter does.
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  PyCapsule_SetDestructor(cap.ptr(), nullptr);
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  auto impl = make_tensor_impl();
  impl->storage = std::make_shared<Storage>(data, nbytes, release_imported, m);
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = *dt;
  impl->recompute_contiguous();
  return Tensor(std::move(impl));
}

const char* buffer_format(DType d) {
  switch (d) {
    case Float32:
      return "f";
    case Float64:
      return "d";
    case Int64:
      return "q";
    case Int32:
      return "i";
    case Bool:
      return "?";
    case Float16:
      return "e";
    case Int8:
      return "b";
    case UInt8:
      return "B";
    case Int16:
      return "h";
    case BF16:
      break;  // no buffer format character: refused before a view is made
  }
  return "B";
}

// What a Py_buffer of a tensor points into: the shape and byte strides it reports.
struct BufferView {
  std::vector<Py_ssize_t> shape, strides;
};

int tensor_getbuffer(PyObject* obj, Py_buffer* view, int flags) {
  view->obj = nullptr;
  try {
    const Tensor& t = py::handle(obj).cast<const Tensor&>();
    if (!t.is_concrete()) {
      PyErr_SetString(value_error_type(),
                      t.is_dead()
                          ? "[buffer] a dead tensor (the untaken side of a switch) has no memory"
                          : "[buffer] only concrete tensors have memory to share");
      return -1;
    }
    if (t.dtype() == BF16 && (flags & PyBUF_FORMAT)) {
      // torch: "Got unsupported ScalarType BFloat16" (NumPy has no bfloat16).
      PyErr_SetString(PyExc_TypeError,
                      "[numpy] Got unsupported ScalarType BFloat16: NumPy has no bfloat16; "
                      "convert with .float() first");
      return -1;
    }
    if (!(flags & PyBUF_STRIDES) && !t.is_contiguous()) {
      PyErr_SetString(PyExc_BufferError, "[buffer] the tensor is not contiguous; ask for strides");
      return -1;
    }
    auto* bv = new BufferView;
    auto item = static_cast<Py_ssize_t>(t.element_size());
    for (int64_t d : t.shape()) bv->shape.push_back(d);
    for (int64_t s : t.strides()) bv->strides.push_back(s * item);
    view->buf = t.raw_data();
    view->obj = obj;
    Py_INCREF(obj);
    view->len = static_cast<Py_ssize_t>(t.numel()) * item;
    view->readonly = 0;
    view->itemsize = item;
    view->format = (flags & PyBUF_FORMAT) ? const_cast<char*>(buffer_format(t.dtype())) : nullptr;
    view->ndim = static_cast<int>(t.dim());
    view->shape = (flags & PyBUF_ND) ? bv->shape.data() : nullptr;
    view->strides = (flags & PyBUF_STRIDES) ? bv->strides.data() : nullptr;
    view->suboffsets = nullptr;
    view->internal = bv;
    return 0;
  } catch (py::error_already_set& e) {  // a Python error (an uninitialized Tensor) as it is
    e.restore();
    return -1;
  } catch (const std::exception& e) {
    PyErr_SetString(error_type(), e.what());
    return -1;
  }
}

void tensor_releasebuffer(PyObject*, Py_buffer* view) {
  delete static_cast<BufferView*>(view->internal);
}

}  // namespace

void init_interop(py::module_& m, TensorClass& cls) {
  // The buffer protocol by hand rather than with def_buffer: pybind11's getbuffer does not
  // catch a C++ exception from the callback, so refusing a dead or symbolic tensor there ended
  // the process (std::terminate) instead of raising.
  auto* tp = reinterpret_cast<PyTypeObject*>(cls.ptr());
  tp->tp_as_buffer->bf_getbuffer = tensor_getbuffer;
  tp->tp_as_buffer->bf_releasebuffer = tensor_releasebuffer;
  cls.def(
      "numpy",
      [](py::object self) {
        const Tensor& t = self.cast<const Tensor&>();  // raises for an uninitialized Tensor,
                                                       // which NumPy would wrap as an object
        if (t.defined() && t.dtype() == BF16)
          raise(type_error_type(),
                str_cat("[numpy] Got unsupported ScalarType BFloat16 (shape ", t.shape(),
                        "): NumPy has no bfloat16; convert with .float() first"));
        return py::module_::import("numpy").attr("asarray")(self);
      },
      "A NumPy array sharing this tensor's memory.");
  cls.def(
      "__dlpack__", [](const Tensor& t, py::object /*stream*/) { return to_dlpack(t); },
      py::arg("stream") = py::none(), "A DLPack capsule sharing this tensor's memory.");
  cls.def("__dlpack_device__", [](const Tensor&) { return py::make_tuple(kDLCPU, 0); });
  m.def("from_numpy", &tensor_from_buffer, py::arg("array"),
        "A tensor sharing the memory of a NumPy array (or any buffer) without a copy; the array "
        "stays alive while the tensor does. Writes through either side show in the other.");
  m.def("from_dlpack", &from_dlpack, py::arg("ext_tensor"),
        "A tensor sharing the memory of an object with __dlpack__ (a torch.Tensor, a NumPy "
        "array) or of a 'dltensor' capsule.");
  m.def("to_dlpack", &to_dlpack, py::arg("tensor"));
}

}  // namespace kiln::python
