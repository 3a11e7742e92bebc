// Tensor.__getitem__ / __setitem__: NumPy indexing written with Kiln's differentiable ops (select,
// slice, unsqueeze for basic indices; index_select on flattened dims for integer tensors and
// lists; nonzero for bool masks), so gradients flow through every kind of index.
#include <unordered_set>

#include "common.h"

namespace kiln::python {
namespace {

struct Item {
  enum Kind { kInt, kSlice, kNone, kEllipsis, kIndex } kind;
  int64_t i = 0;
  py::handle slice;
  std::vector<Tensor> idx;   // kIndex: one int64 tensor per dim it consumes (a mask gives several)
  std::vector<Shape> masks;  // kIndex: the shape of each bool mask in it (checked against the dims)
};

[[noreturn]] void out_of_range(int64_t i, int64_t dim, int64_t size) {
  raise(index_error_type(),
        str_cat("[getitem] index ", i, " is out of range for dim ", dim, " of size ", size));
}

Tensor as_index_tensor(py::handle h) {
  if (py::isinstance<Tensor>(h)) return h.cast<Tensor>();
  return tensor_from_object(h);  // a list of ints or bools, a NumPy array
}

std::vector<Item> parse(py::handle key) {
  std::vector<Item> items;
  py::tuple tup =
      PyTuple_Check(key.ptr()) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  for (py::handle h : tup) {
    Item it{Item::kInt};
    if (h.is_none()) {
      it.kind = Item::kNone;
    } else if (h.ptr() == Py_Ellipsis) {
      it.kind = Item::kEllipsis;
    } else if (PySlice_Check(h.ptr())) {
      it.kind = Item::kSlice;
      it.slice = h;
    } else if (PyBool_Check(h.ptr())) {
      raise(type_error_type(), "[getitem] a bool is not an index (use a bool tensor as a mask)");
    } else if (PyLong_Check(h.ptr()) || (!py::isinstance<Tensor>(h) && PyIndex_Check(h.ptr()))) {
      it.i = py::int_(py::reinterpret_borrow<py::object>(h)).cast<int64_t>();
    } else if (py::isinstance<Tensor>(h) || PyList_Check(h.ptr()) ||
               PyObject_CheckBuffer(h.ptr())) {
      Tensor t = as_index_tensor(h);
      it.kind = Item::kIndex;
      if (t.dtype() == Bool) {
        if (t.dim() == 0) raise(index_error_type(), "[getitem] a 0-d bool mask is not supported");
        Tensor nz = nonzero(t);  // [n, k]
        for (int64_t k = 0; k < t.dim(); ++k) it.idx.push_back(nz.select(1, k));
        it.masks.push_back(t.shape());
      } else if (is_integral(t.dtype())) {
        it.idx.push_back(t.to(Int64));
      } else {
        raise(index_error_type(), str_cat("[getitem] tensors used as indices must be integer or "
                                          "bool, got ",
                                          t.dtype()));
      }
    } else {
      raise(type_error_type(),
            str_cat("[getitem] unsupported index type ",
                    py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>()));
    }
    items.push_back(std::move(it));
  }
  // Adjacent integer-tensor indices select together (a[i, j] pairs i[k] with j[k], as NumPy
  // does); separated ones would move their dims to the front, which Kiln does not do.
  std::vector<Item> merged;
  bool seen_index = false;
  for (Item& it : items) {
    if (it.kind == Item::kIndex && !merged.empty() && merged.back().kind == Item::kIndex) {
      for (Tensor& t : it.idx) merged.back().idx.push_back(std::move(t));
      for (Shape& m : it.masks) merged.back().masks.push_back(std::move(m));
      continue;
    }
    if (it.kind == Item::kIndex && seen_index)
      raise(index_error_type(),
            "[getitem] integer-tensor indices separated by a slice are not "
            "supported; index in two steps");
    seen_index = seen_index || it.kind == Item::kIndex;
    merged.push_back(std::move(it));
  }
  return merged;
}

// A bool mask indexes as many dims as it has, and they must be its shape: torch refuses a mask
// [3] on a [2, 3] tensor, which would otherwise pick rows by the mask's first elements.
void check_masks(const Item& it, const Tensor& r, int64_t d) {
  if (it.masks.empty()) return;
  size_t dims = 0;
  for (const Shape& m : it.masks) dims += static_cast<size_t>(m.rank());
  if (dims != it.idx.size()) return;  // masks mixed with integer indices: positions vary
  int64_t k = d;
  for (const Shape& m : it.masks) {
    for (int64_t j = 0; j < m.rank(); ++j) {
      const int64_t want = r.size(k + j);
      if (want >= 0 && m[j] != want)
        raise(index_error_type(), str_cat("[getitem] the shape of the mask ", m, " at index ", j,
                                          " does not match the shape of the indexed tensor ",
                                          r.shape(), " at index ", k + j));
    }
    k += m.rank();
  }
}

int64_t consumed(const Item& it) {
  switch (it.kind) {
    case Item::kInt:
    case Item::kSlice:
      return 1;
    case Item::kIndex:
      return static_cast<int64_t>(it.idx.size());
    default:
      return 0;
  }
}

// Gathers with the integer index tensors `idx` (broadcast together) over dims d .. d+k-1 of r:
// those dims are flattened into one and the broadcast index shape takes their place.
Tensor advanced(const Tensor& r, int64_t d, const std::vector<Tensor>& idx) {
  int64_t k = static_cast<int64_t>(idx.size());
  Shape bshape = idx[0].shape();
  for (int64_t j = 1; j < k; ++j) bshape = broadcast_shapes(bshape, idx[j].shape(), "getitem");
  Tensor linear;
  for (int64_t j = 0; j < k; ++j) {
    int64_t size = r.size(d + j);
    Tensor ij = idx[j];
    if (size >= 0 && ij.is_concrete() && ij.numel() > 0) {
      int64_t hi = max(ij).item<int64_t>(), lo = min(ij).item<int64_t>();
      if (hi >= size) out_of_range(hi, d + j, size);
      if (lo < -size) out_of_range(lo, d + j, size);
    }
    ij = where(lt(ij, 0), add(ij, size), ij).to(Int64);
    linear = j == 0 ? ij : add(mul(linear, size), ij).to(Int64);
  }
  linear = expand(linear, bshape).reshape(Shape{-1});
  Tensor flat = k > 1 ? r.flatten(d, d + k - 1) : r;
  Tensor g = index_select(flat, d, linear);
  std::vector<int64_t> out;
  for (int64_t j = 0; j < d; ++j) out.push_back(g.size(j));
  for (int64_t s : bshape) out.push_back(s);
  for (int64_t j = d + 1; j < g.dim(); ++j) out.push_back(g.size(j));
  return g.reshape(Shape(out));
}

Tensor get(const Tensor& t, py::handle key) {
  std::vector<Item> items = parse(key);
  int64_t used = 0, ellipses = 0;
  for (const Item& it : items) {
    used += consumed(it);
    ellipses += it.kind == Item::kEllipsis;
  }
  if (ellipses > 1) raise(index_error_type(), "[getitem] an index can only have one ellipsis");
  if (used > t.dim())
    raise(index_error_type(),
          str_cat("[getitem] too many indices for a tensor of dimension ", t.dim()));
  Tensor r = t;
  int64_t d = 0;
  for (const Item& it : items) {
    switch (it.kind) {
      case Item::kEllipsis:
        d += t.dim() - used;
        break;
      case Item::kNone:
        r = r.unsqueeze(d++);
        break;
      case Item::kInt: {
        int64_t size = r.size(d);
        if (size >= 0 && (it.i >= size || it.i < -size)) out_of_range(it.i, d, size);
        r = r.select(d, it.i);
        break;
      }
      case Item::kSlice: {
        // Bounds that are symbolic sizes (x[:, :T] under jit) stay symbols in the slice.
        py::object s0 = it.slice.attr("start"), s1 = it.slice.attr("stop"),
                   s2 = it.slice.attr("step");
        if (is_symbolic_size(s0) || is_symbolic_size(s1) || is_symbolic_size(s2)) {
          const SymInt b = s0.is_none() ? SymInt(0) : sym_sizes_from(s0, "getitem")[0];
          const SymInt e = s1.is_none() ? SymInt(INT64_MAX) : sym_sizes_from(s1, "getitem")[0];
          const SymInt st = s2.is_none() ? SymInt(1) : sym_sizes_from(s2, "getitem")[0];
          r = kiln::slice(r, d, b, e, st);
          ++d;
          break;
        }
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(it.slice.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
        if (step <= 0) raise(value_error_type(), "[getitem] slice step must be positive");
        int64_t size = r.size(d);
        if (size >= 0) {
          Py_ssize_t n = PySlice_AdjustIndices(size, &start, &stop, step);
          if (n == 0) stop = start;
          r = r.slice(d, start, stop, step);
        } else if (start != 0 || stop != PY_SSIZE_T_MAX || step != 1) {
          r = r.slice(d, start, stop == PY_SSIZE_T_MAX ? INT64_MAX : stop, step);
        }
        ++d;
        break;
      }
      case Item::kIndex: {
        check_masks(it, r, d);
        int64_t before = r.dim() - static_cast<int64_t>(it.idx.size());
        r = advanced(r, d, it.idx);
        d += r.dim() - before;  // the broadcast index's dims replace the ones it consumed
        break;
      }
    }
  }
  return r;
}

bool has_advanced(py::handle key) {
  py::tuple tup =
      PyTuple_Check(key.ptr()) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  for (py::handle h : tup)
    if (py::isinstance<Tensor>(h) || PyList_Check(h.ptr()) || PyObject_CheckBuffer(h.ptr()))
      return true;
  return false;
}

// t[key] = value with integer-tensor (or list) indices, NumPy's rules: the positions are what
// t[key] reads, found by indexing a tensor of flat positions with the same key (so getitem's
// checks raise IndexError for an index out of range); value broadcasts to their shape; of
// repeated positions the last write wins. The write is a where() over the whole tensor copied
// back in place, O(t.numel()); with autograd one element write through a view per position.
void set_advanced(Tensor& t, py::handle key, const Tensor& value) {
  const int64_t n = t.numel();
  Tensor pos = get(arange(0, static_cast<double>(n), 1, Int64).reshape(t.shape()), key);
  Tensor v = value.to(t.dtype());
  const Shape& want = pos.shape();
  bool fits = v.dim() <= static_cast<int64_t>(want.size());
  for (int64_t i = 1; fits && i <= v.dim(); ++i) {
    const int64_t a = v.size(v.dim() - i), b = want[want.size() - static_cast<size_t>(i)];
    fits = a == 1 || a == b;
  }
  if (!fits)
    raise(value_error_type(), str_cat("[setitem] a value of shape ", v.shape(),
                                      " does not broadcast to the indexed shape ", want));
  Tensor p = pos.reshape(Shape{-1});
  Tensor vals = expand(v, want).reshape(Shape{-1});
  if (p.numel() == 0) return;
  // Repeated positions: keep each one's last write, as NumPy does.
  std::vector<int64_t> ps = p.to_vector<int64_t>();
  std::vector<bool> keep(ps.size(), true);
  std::unordered_set<int64_t> seen;
  bool dropped = false;
  for (size_t j = ps.size(); j-- > 0;)
    if (!seen.insert(ps[j]).second) keep[j] = false, dropped = true;
  if (dropped) {
    Tensor k = tensor(keep);
    p = masked_select(p, k);
    vals = masked_select(vals, k);
  }
  if (grad_mode_enabled() && (t.requires_grad() || vals.requires_grad())) {
    // With autograd, one element write through a view per position: a where() over t copied
    // back into t would have saved t for its gradient and then changed it.
    const std::vector<int64_t> flat = p.to_vector<int64_t>();
    for (size_t j = 0; j < flat.size(); ++j) {
      Tensor e = t;
      for (int64_t d = 0, rest = flat[j], stride = n; d < t.dim(); ++d) {
        stride /= t.size(d);
        e = e.select(0, rest / stride);
        rest %= stride;
      }
      e.copy_(vals.select(0, static_cast<int64_t>(j)));
    }
    return;
  }
  // writer[i]: 1 + the index into vals of the write to flat position i, 0 where none lands.
  Tensor writer =
      scatter_add(zeros({n}, Int64), 0, p, arange(1, static_cast<double>(p.numel()) + 1, 1, Int64));
  Tensor hit = gt(writer, 0.0);
  Tensor src =
      index_select(vals, 0, clamp(sub(writer, 1), 0, static_cast<double>(p.numel())).to(Int64));
  t.copy_(where(hit.reshape(t.shape()), src.reshape(t.shape()), t));
}

}  // namespace

void init_indexing(TensorClass& cls) {
  cls.def("__getitem__", &get,
          "NumPy indexing: ints, slices (positive steps), None, ..., integer tensors or lists "
          "(gathered, differentiable) and bool masks.");
  cls.def("__setitem__", [](Tensor& t, py::handle key, py::handle v) {
    // A Python number takes the tensor's dtype (a float is not rounded to float32 first).
    TensorLike value{py::isinstance<Tensor>(v) ? v.cast<Tensor>()
                                               : tensor_from_object(v, t.dtype())};
    if (has_advanced(key)) {
      // A bool mask of the tensor's own shape: a where() written back in place.
      if (py::isinstance<Tensor>(key)) {
        const Tensor& mask = key.cast<const Tensor&>();
        if (mask.dtype() == Bool && mask.shape() == t.shape()) {
          t.copy_(where(mask, value.t.to(t.dtype()), t));
          return;
        }
      }
      set_advanced(t, key, value.t);
      return;
    }
    Tensor view = get(t, key);
    view.copy_(value.t);
  });
}

}  // namespace kiln::python
