// Shape and copy ops as functions (kiln.reshape, cat, split, ...), the state ops of graphs
// (print, assign, group) and control flow as dataflow (switch_, merge, cond, while_loop) with
// Python callables as branches and loop bodies.
#include "common.h"

namespace kiln::python {
namespace {

std::vector<Tensor> tensors_of(py::handle h, const char* what) { return tensors_from(h, what); }

py::tuple tuple_of(const std::vector<Tensor>& v) {
  py::tuple t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = py::cast(v[i]);
  return t;
}

}  // namespace

// ---- indexing and shape helpers with torch's names (kiln/ops/index_ops.cpp, shape_ops.cpp,
// join_ops.cpp). In-place forms (scatter_, index_put_, ...) compute out of place and copy_ the
// result in, so autograd and the leaf rules are copy_'s.
namespace {

Tensor value_like(py::handle v, const Tensor& like) {
  if (py::isinstance<Tensor>(v)) return v.cast<Tensor>();
  return tensor_from_object(v, like.dtype());
}

std::vector<int64_t> ints_or_args(const py::args& args, const char* what) {
  if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) return ints_from(args[0], what);
  return ints_from(args, what);
}

// Tensors given as varargs or as one sequence (meshgrid(a, b) and meshgrid([a, b])).
std::vector<Tensor> tensors_of_args(const py::args& args, const char* what) {
  if (args.size() == 1 && !py::isinstance<Tensor>(args[0])) return tensors_of(args[0], what);
  return tensors_of(args, what);
}

py::object unique_result(const UniqueResult& r, bool inverse, bool counts) {
  if (!inverse && !counts) return py::cast(r.values);
  if (inverse && counts) return py::make_tuple(r.values, r.inverse, r.counts);
  return py::make_tuple(r.values, inverse ? r.inverse : r.counts);
}

Tensor scatter_py(const Tensor& a, int64_t dim, const Tensor& idx, py::object src, py::object value,
                  py::object reduce) {
  const std::string red = reduce.is_none() ? "" : reduce.cast<std::string>();
  if (!src.is_none() && !value.is_none())
    raise(type_error_type(), "[scatter] give src or value, not both");
  py::object s = src.is_none() ? value : src;
  if (s.is_none()) raise(type_error_type(), "[scatter] needs src (a tensor) or value (a number)");
  if (py::isinstance<Tensor>(s)) return scatter(a, dim, idx, s.cast<Tensor>(), red);
  return scatter(a, dim, idx, s.cast<double>(), red);
}

std::vector<Tensor> index_list(py::handle h) {
  if (py::isinstance<Tensor>(h)) return {h.cast<Tensor>()};
  std::vector<Tensor> out;
  for (py::handle e : py::reinterpret_borrow<py::sequence>(h))
    out.push_back(py::isinstance<Tensor>(e) ? e.cast<Tensor>() : tensor_from_object(e));
  return out;
}

py::object split_py(std::vector<Tensor> (*by_n)(const Tensor&, int64_t),
                    std::vector<Tensor> (*by_idx)(const Tensor&, const std::vector<int64_t>&),
                    const Tensor& a, py::object s, const char* what) {
  if (PyIndex_Check(s.ptr())) return tuple_of(by_n(a, s.cast<int64_t>()));
  return tuple_of(by_idx(a, ints_from(s, what)));
}

py::object atleast(Tensor (*f)(const Tensor&), const py::args& args, const char* what) {
  if (args.size() == 1 && py::isinstance<Tensor>(args[0]))
    return py::cast(f(args[0].cast<Tensor>()));
  std::vector<Tensor> out;
  for (const Tensor& t : tensors_of_args(args, what)) out.push_back(f(t));
  return tuple_of(out);
}

void init_index_shape(py::module_& m, TensorClass& cls) {
  def_both(m, cls, "scatter",
           "A copy of input with src (or value) written at index along dim; reduce 'add' or "
           "'multiply' combines instead (torch.scatter).",
           &scatter_py, py::arg("dim"), py::arg("index"), py::arg("src") = py::none(),
           py::kw_only(), py::arg("value") = py::none(), py::arg("reduce") = py::none());
  cls.def(
      "scatter_",
      [](Tensor& self, int64_t dim, const Tensor& idx, py::object src, py::object value,
         py::object reduce) { return self.copy_(scatter_py(self, dim, idx, src, value, reduce)); },
      py::arg("dim"), py::arg("index"), py::arg("src") = py::none(), py::kw_only(),
      py::arg("value") = py::none(), py::arg("reduce") = py::none());
  auto scatter_reduce_f = [](const Tensor& a, int64_t dim, const Tensor& idx, const Tensor& src,
                             const std::string& reduce, bool include_self) {
    return scatter_reduce(a, dim, idx, src, reduce, include_self);
  };
  def_both(m, cls, "scatter_reduce",
           "src's values reduced (sum, prod, mean, amax, amin) into a copy of input at index.",
           scatter_reduce_f, py::arg("dim"), py::arg("index"), py::arg("src"), py::arg("reduce"),
           py::kw_only(), py::arg("include_self") = true);
  cls.def(
      "scatter_reduce_",
      [](Tensor& self, int64_t dim, const Tensor& idx, const Tensor& src, const std::string& reduce,
         bool include_self) {
        return self.copy_(scatter_reduce(self, dim, idx, src, reduce, include_self));
      },
      py::arg("dim"), py::arg("index"), py::arg("src"), py::arg("reduce"), py::kw_only(),
      py::arg("include_self") = true);
  auto index_put_f = [](const Tensor& a, py::object indices, py::object values, bool acc) {
    return index_put(a, index_list(indices), value_like(values, a), acc);
  };
  def_both(m, cls, "index_put",
           "A copy of input with input[indices] = values (accumulate: +=), torch.index_put.",
           index_put_f, py::arg("indices"), py::arg("values"), py::arg("accumulate") = false);
  cls.def(
      "index_put_",
      [](Tensor& self, py::object indices, py::object values, bool acc) {
        return self.copy_(index_put(self, index_list(indices), value_like(values, self), acc));
      },
      py::arg("indices"), py::arg("values"), py::arg("accumulate") = false);
  auto index_fill_f = [](const Tensor& a, int64_t dim, const Tensor& idx, py::object value) {
    return index_fill(
        a, dim, idx,
        py::isinstance<Tensor>(value) ? value.cast<Tensor>().item<double>() : value.cast<double>());
  };
  def_both(m, cls, "index_fill", "value in the slices along dim that index names.", index_fill_f,
           py::arg("dim"), py::arg("index"), py::arg("value"));
  cls.def(
      "index_fill_",
      [index_fill_f](Tensor& self, int64_t dim, const Tensor& idx, py::object value) {
        return self.copy_(index_fill_f(self, dim, idx, value));
      },
      py::arg("dim"), py::arg("index"), py::arg("value"));
  def_both(
      m, cls, "index_copy", "source's slices written along dim at index.",
      [](const Tensor& a, int64_t dim, const Tensor& idx, const Tensor& src) {
        return index_copy(a, dim, idx, src);
      },
      py::arg("dim"), py::arg("index"), py::arg("source"));
  cls.def(
      "index_copy_",
      [](Tensor& self, int64_t dim, const Tensor& idx, const Tensor& src) {
        return self.copy_(index_copy(self, dim, idx, src));
      },
      py::arg("dim"), py::arg("index"), py::arg("source"));
  def_both(
      m, cls, "take", "Elements of the flattened input at index (negative from the end).",
      [](const Tensor& a, const Tensor& idx) { return take(a, idx); }, py::arg("index"));
  def_both(
      m, cls, "take_along_dim", "gather along dim after broadcasting; dim None: flattened.",
      [](const Tensor& a, const Tensor& idx, std::optional<int64_t> dim) {
        return take_along_dim(a, idx, dim);
      },
      py::arg("indices"), py::arg("dim") = py::none());
  def_both(
      m, cls, "masked_scatter", "input with source's first elements where mask is true.",
      [](const Tensor& a, const Tensor& mask, const Tensor& src) {
        return masked_scatter(a, mask, src);
      },
      py::arg("mask"), py::arg("source"));
  cls.def(
      "masked_scatter_",
      [](Tensor& self, const Tensor& mask, const Tensor& src) {
        return self.copy_(masked_scatter(self, mask, src));
      },
      py::arg("mask"), py::arg("source"));

  def_both(
      m, cls, "unbind", "The slices along dim, as a tuple.",
      [](const Tensor& a, int64_t dim) { return tuple_of(unbind(a, dim)); }, py::arg("dim") = 0);
  auto movedim_f = [](const Tensor& a, py::object s, py::object d) {
    return movedim(a, ints_from(s, "movedim"), ints_from(d, "movedim"));
  };
  def_both(m, cls, "movedim", "Dims source moved to destination.", movedim_f, py::arg("source"),
           py::arg("destination"));
  def_both(m, cls, "moveaxis", "movedim.", movedim_f, py::arg("source"), py::arg("destination"));
  def_both(
      m, cls, "swapaxes", "transpose.",
      [](const Tensor& a, int64_t d0, int64_t d1) { return swapaxes(a, d0, d1); }, py::arg("axis0"),
      py::arg("axis1"));
  def_both(
      m, cls, "swapdims", "transpose.",
      [](const Tensor& a, int64_t d0, int64_t d1) { return swapaxes(a, d0, d1); }, py::arg("dim0"),
      py::arg("dim1"));
  m.def(
      "tile", [](const Tensor& a, py::object reps) { return tile(a, ints_from(reps, "tile")); },
      py::arg("input"), py::arg("dims"));
  cls.def("tile",
          [](const Tensor& a, py::args reps) { return tile(a, ints_or_args(reps, "tile")); });
  m.def(
      "narrow",
      [](const Tensor& a, int64_t dim, const SymInt& start, const SymInt& length) {
        return narrow(a, dim, start, length);
      },
      py::arg("input"), py::arg("dim"), py::arg("start"), py::arg("length"));
  def_both(
      m, cls, "unique", "Distinct values (sorted); optionally inverse indices and counts.",
      [](const Tensor& a, bool sorted, bool inverse, bool counts, py::object dim) {
        if (!dim.is_none())
          raise(value_error_type(), "[unique] dim is not supported (only dim=None)");
        return unique_result(unique(a, sorted), inverse, counts);
      },
      py::arg("sorted") = true, py::arg("return_inverse") = false, py::arg("return_counts") = false,
      py::arg("dim") = py::none());
  def_both(
      m, cls, "unique_consecutive", "One value per run of equal consecutive elements.",
      [](const Tensor& a, bool inverse, bool counts, py::object dim) {
        if (!dim.is_none())
          raise(value_error_type(), "[unique_consecutive] dim is not supported (only dim=None)");
        return unique_result(unique_consecutive(a), inverse, counts);
      },
      py::arg("return_inverse") = false, py::arg("return_counts") = false,
      py::arg("dim") = py::none());
  m.def(
      "searchsorted",
      [](const Tensor& seq, const TensorLike& v, bool i32, bool right, py::object side,
         py::object sorter) {
        if (!side.is_none()) {
          const std::string s = side.cast<std::string>();
          if (s != "left" && s != "right")
            raise(value_error_type(),
                  "[searchsorted] side must be 'left' or 'right', got '" + s + "'");
          if (right && s == "left")
            raise(value_error_type(), "[searchsorted] side='left' contradicts right=True");
          right = s == "right";
        }
        return searchsorted(seq, v.t, i32, right,
                            sorter.is_none() ? Tensor() : sorter.cast<Tensor>());
      },
      py::arg("sorted_sequence"), py::arg("input"), py::kw_only(), py::arg("out_int32") = false,
      py::arg("right") = false, py::arg("side") = py::none(), py::arg("sorter") = py::none());
  m.def(
      "bucketize",
      [](const TensorLike& x, const Tensor& b, bool i32, bool right) {
        return bucketize(x.t, b, i32, right);
      },
      py::arg("input"), py::arg("boundaries"), py::kw_only(), py::arg("out_int32") = false,
      py::arg("right") = false);
  cls.def(
      "bucketize",
      [](const Tensor& x, const Tensor& b, bool i32, bool right) {
        return bucketize(x, b, i32, right);
      },
      py::arg("boundaries"), py::kw_only(), py::arg("out_int32") = false, py::arg("right") = false);
  m.def(
      "meshgrid",
      [](py::args xs, const std::string& indexing) {
        return tuple_of(meshgrid(tensors_of_args(xs, "meshgrid"), indexing));
      },
      py::kw_only(), py::arg("indexing") = "ij");
  auto rep_il = [](const Tensor& a, py::object repeats, py::object dim, py::object) {
    std::optional<int64_t> d;
    if (!dim.is_none()) d = dim.cast<int64_t>();
    if (repeats.is_none()) return repeat_interleave(a);
    if (py::isinstance<Tensor>(repeats)) return repeat_interleave(a, repeats.cast<Tensor>(), d);
    return repeat_interleave(a, repeats.cast<int64_t>(), d);
  };
  def_both(m, cls, "repeat_interleave",
           "Each element (slice along dim) repeated; repeats an int or a tensor of counts.", rep_il,
           py::arg("repeats") = py::none(), py::arg("dim") = py::none(), py::kw_only(),
           py::arg("output_size") = py::none());
  def_both(m, cls, "fliplr", "flip along dim 1.", [](const Tensor& a) { return fliplr(a); });
  def_both(m, cls, "flipud", "flip along dim 0.", [](const Tensor& a) { return flipud(a); });
  def_both(
      m, cls, "rot90", "k quarter turns in the plane of dims.",
      [](const Tensor& a, int64_t k, py::object dims) {
        return rot90(a, k, ints_from(dims, "rot90"));
      },
      py::arg("k") = 1, py::arg("dims") = py::make_tuple(0, 1));
  def_both(
      m, cls, "tensor_split", "Nearly equal sections, or pieces cut before each index.",
      [](const Tensor& a, py::object s, int64_t dim) {
        if (PyIndex_Check(s.ptr())) return tuple_of(tensor_split(a, s.cast<int64_t>(), dim));
        return tuple_of(tensor_split(a, ints_from(s, "tensor_split"), dim));
      },
      py::arg("indices_or_sections"), py::arg("dim") = 0);
  def_both(
      m, cls, "hsplit", "tensor_split along dim 1 (0 for 1-D); an int must divide the size.",
      [](const Tensor& a, py::object s) { return split_py(&hsplit, &hsplit, a, s, "hsplit"); },
      py::arg("indices_or_sections"));
  def_both(
      m, cls, "vsplit", "tensor_split along dim 0; an int must divide the size.",
      [](const Tensor& a, py::object s) { return split_py(&vsplit, &vsplit, a, s, "vsplit"); },
      py::arg("indices_or_sections"));
  def_both(
      m, cls, "dsplit", "tensor_split along dim 2; an int must divide the size.",
      [](const Tensor& a, py::object s) { return split_py(&dsplit, &dsplit, a, s, "dsplit"); },
      py::arg("indices_or_sections"));
  m.def("atleast_1d", [](py::args a) { return atleast(&atleast_1d, a, "atleast_1d"); });
  m.def("atleast_2d", [](py::args a) { return atleast(&atleast_2d, a, "atleast_2d"); });
  m.def("atleast_3d", [](py::args a) { return atleast(&atleast_3d, a, "atleast_3d"); });
  def_both(
      m, cls, "broadcast_to", "expand to size.",
      [](const Tensor& a, py::object s) { return broadcast_to(a, shape_from(s)); },
      py::arg("size"));
  m.def("broadcast_tensors", [](py::args xs) {
    return tuple_of(broadcast_tensors(tensors_of_args(xs, "broadcast_tensors")));
  });
  m.def("broadcast_shapes", [](py::args shapes) {
    Shape s;
    for (py::handle h : shapes) s = broadcast_shapes(s, shape_from(h), "broadcast_shapes");
    return py::tuple(py::cast(s.vec()));
  });
  m.def(
      "hstack", [](py::object xs) { return hstack(tensors_of(xs, "hstack")); }, py::arg("tensors"));
  m.def(
      "vstack", [](py::object xs) { return vstack(tensors_of(xs, "vstack")); }, py::arg("tensors"));
  m.attr("row_stack") = m.attr("vstack");
  m.def(
      "dstack", [](py::object xs) { return dstack(tensors_of(xs, "dstack")); }, py::arg("tensors"));
  m.def(
      "column_stack", [](py::object xs) { return column_stack(tensors_of(xs, "column_stack")); },
      py::arg("tensors"));
  auto tri_idx = [](Tensor (*f)(int64_t, int64_t, int64_t)) {
    return [f](int64_t row, int64_t col, int64_t offset, py::object dtype) {
      Tensor t = f(row, col, offset);
      return dtype.is_none() ? t : cast(t, dtype_from(dtype));
    };
  };
  m.def("triu_indices", tri_idx(&triu_indices), py::arg("row"), py::arg("col"),
        py::arg("offset") = 0, py::kw_only(), py::arg("dtype") = py::none());
  m.def("tril_indices", tri_idx(&tril_indices), py::arg("row"), py::arg("col"),
        py::arg("offset") = 0, py::kw_only(), py::arg("dtype") = py::none());
  def_both(m, cls, "argwhere", "Coordinates [n, rank] of the nonzero elements.",
           [](const Tensor& a) { return argwhere(a); });
  // torch.where(condition) alone: nonzero(condition, as_tuple=True).
  m.def(
      "where", [](const Tensor& c) { return tuple_of(where(c)); }, py::arg("condition"));
  m.def(
      "logspace",
      [](double a, double b, int64_t n, double base, py::object d, bool requires_grad) {
        Tensor t = logspace(a, b, n, base, d.is_none() ? Float32 : dtype_from(d));
        if (requires_grad) t.requires_grad_(true);
        return t;
      },
      py::arg("start"), py::arg("end"), py::arg("steps"), py::arg("base") = 10.0, py::kw_only(),
      py::arg("dtype") = py::none(), py::arg("requires_grad") = false);
}

}  // namespace

void init_ops_shape(py::module_& m, TensorClass& cls) {
  m.def(
      "reshape",
      [](const Tensor& a, py::object s) {
        if (any_symbolic_size(s)) return reshape_symint(a, sym_sizes_from(s, "reshape"));
        return reshape(a, Shape(ints_from(s, "reshape")));
      },
      py::arg("input"), py::arg("shape"));
  m.def(
      "transpose", [](const Tensor& a, int64_t d0, int64_t d1) { return transpose(a, d0, d1); },
      py::arg("input"), py::arg("dim0"), py::arg("dim1"));
  m.def(
      "permute", [](const Tensor& a, py::object d) { return permute(a, ints_from(d, "permute")); },
      py::arg("input"), py::arg("dims"));
  def_both(
      m, cls, "slice", "Elements start, start+step, ... < end along dim (a view).",
      [](const Tensor& a, int64_t dim, int64_t start, py::object end, int64_t step) {
        return slice(a, dim, start, end.is_none() ? INT64_MAX : end.cast<int64_t>(), step);
      },
      py::arg("dim"), py::arg("start") = 0, py::arg("end") = py::none(), py::arg("step") = 1);
  m.def(
      "expand",
      [](const Tensor& a, py::object s) {
        if (any_symbolic_size(s)) return expand_symint(a, sym_sizes_from(s, "expand"));
        return expand(a, shape_from(s));
      },
      py::arg("input"), py::arg("size"));
  m.def(
      "expand_as", [](const Tensor& a, const Tensor& b) { return expand_as(a, b); },
      py::arg("input"), py::arg("other"));
  m.def(
      "squeeze",
      [](const Tensor& a, py::object d) {
        return d.is_none() ? squeeze(a) : squeeze(a, d.cast<int64_t>());
      },
      py::arg("input"), py::arg("dim") = py::none());
  m.def(
      "unsqueeze", [](const Tensor& a, int64_t d) { return unsqueeze(a, d); }, py::arg("input"),
      py::arg("dim"));
  m.def(
      "flatten", [](const Tensor& a, int64_t s, int64_t e) { return flatten(a, s, e); },
      py::arg("input"), py::arg("start_dim") = 0, py::arg("end_dim") = -1);
  m.def(
      "contiguous", [](const Tensor& a) { return contiguous(a); }, py::arg("input"));
  m.def(
      "clone", [](const Tensor& a) { return clone(a); }, py::arg("input"));
  m.def(
      "cast", [](const Tensor& a, py::object d) { return cast(a, dtype_from(d)); },
      py::arg("input"), py::arg("dtype"), "A cast; the gradient casts back.");
  m.def(
      "detach", [](const Tensor& a) { return detach(a); }, py::arg("input"), "stop_gradient.");
  def_both(
      m, cls, "pad",
      "torch.nn.functional.pad: mode 'constant' (negative amounts crop), 'reflect', 'replicate' "
      "or 'circular'.",
      [](const Tensor& a, py::object pads, py::object mode, py::object value) {
        // (a number third is the value: Kiln's earlier pad(input, pad, value))
        if (!mode.is_none() && !py::isinstance<py::str>(mode)) {
          value = mode;
          mode = py::none();
        }
        const std::string md = mode.is_none() ? "constant" : mode.cast<std::string>();
        const double v = value.is_none() ? 0.0 : value.cast<double>();
        return pad(a, ints_from(pads, "pad"), md, v);
      },
      py::arg("pad"), py::arg("mode") = "constant", py::arg("value") = py::none());
  def_both(
      m, cls, "as_strided", "A view with the given sizes and element strides.",
      [](const Tensor& a, py::object sz, py::object st, int64_t off) {
        return as_strided(a, ints_from(sz, "as_strided"), ints_from(st, "as_strided"), off);
      },
      py::arg("size"), py::arg("stride"), py::arg("storage_offset") = 0);
  m.def(
      "cat",
      [](py::object xs, int64_t dim) {
        if (py::isinstance<Tensor>(xs))
          raise(type_error_type(), "[cat] expects a list or tuple of tensors, got a Tensor");
        std::vector<Tensor> ts = tensors_of(xs, "cat");
        MaybeNoGil g(!ts.empty() && big(ts[0]));
        return cat(ts, dim);
      },
      py::arg("tensors"), py::arg("dim") = 0, "Concatenates along dim.");
  m.attr("concat") = m.attr("cat");
  m.def(
      "stack", [](py::object xs, int64_t dim) { return stack(tensors_of(xs, "stack"), dim); },
      py::arg("tensors"), py::arg("dim") = 0, "Stacks along a new dim.");
  def_both(
      m, cls, "split", "Pieces of split_size (an int, or a list of sizes) along dim.",
      [](const Tensor& a, py::object size, int64_t dim) {
        if (PyIndex_Check(size.ptr())) return tuple_of(split(a, size.cast<int64_t>(), dim));
        return tuple_of(split(a, ints_from(size, "split"), dim));
      },
      py::arg("split_size_or_sections"), py::arg("dim") = 0);
  def_both(
      m, cls, "chunk", "`chunks` pieces along dim.",
      [](const Tensor& a, int64_t chunks, int64_t dim) { return tuple_of(chunk(a, chunks, dim)); },
      py::arg("chunks"), py::arg("dim") = 0);
  def_both(
      m, cls, "flip", "Reversed along each of dims (a copy).",
      [](const Tensor& a, py::object dims) { return flip(a, ints_from(dims, "flip")); },
      py::arg("dims"));
  def_both(
      m, cls, "roll", "Shifted by `shifts` along dim, wrapping around.",
      [](const Tensor& a, int64_t shift, int64_t dim) { return roll(a, shift, dim); },
      py::arg("shifts"), py::arg("dims"));
  cls.def("repeat", [](const Tensor& a, py::args reps) {
    return repeat(a, reps.size() == 1 && !PyIndex_Check(reps[0].ptr())
                         ? ints_from(reps[0], "repeat")
                         : ints_from(reps, "repeat"));
  });
  m.def(
      "repeat",
      [](const Tensor& a, py::object reps) { return repeat(a, ints_from(reps, "repeat")); },
      py::arg("input"), py::arg("repeats"));

  // ---- state and side effects ----
  m.def(
      "print", [](const Tensor& t, const std::string& msg) { return print(t, msg); },
      py::arg("input"), py::arg("message") = "",
      "Identity that prints `message` and the value each time it executes (TF1's tf.Print); in "
      "a graph it prints on every Session.run that needs it.");
  m.def(
      "assign", [](const Tensor& var, const TensorLike& v) { return assign(var, v.t); },
      py::arg("variable"), py::arg("value"),
      "Writes value into the variable when executed (TF1's tf.assign).");
  m.def(
      "group", [](py::object deps) { return group(tensors_of(deps, "group")); }, py::arg("deps"),
      "One node that runs all deps (TF1's tf.group).");

  // ---- control flow ----
  m.def(
      "switch_",
      [](const Tensor& data, const Tensor& pred) { return tuple_of(switch_(data, pred)); },
      py::arg("data"), py::arg("pred"),
      "(false_out, true_out): data goes to the side pred selects; the other is dead.");
  m.def(
      "merge", [](py::object xs) { return tuple_of(merge(tensors_of(xs, "merge"))); },
      py::arg("inputs"), "(out, value_index): forwards the live input.");
  m.def(
      "cond",
      [](const Tensor& pred, py::function t, py::function f) -> py::object {
        // One result or a tuple, as the branches return.
        bool many = false;
        auto call = [&many](py::function& fn) {
          py::object r = fn();
          if (py::isinstance<Tensor>(r)) return std::vector<Tensor>{r.cast<Tensor>()};
          many = true;
          return tensors_of(r, "cond");
        };
        std::vector<Tensor> out = cond(
            pred, [&] { return call(t); }, [&] { return call(f); });
        if (!many && out.size() == 1) return py::cast(out[0]);
        return tuple_of(out);
      },
      py::arg("pred"), py::arg("true_fn"), py::arg("false_fn"),
      "pred ? true_fn() : false_fn(). Eagerly runs one branch; with a symbolic pred builds both "
      "as Switch/Merge.");
  m.def(
      "while_loop",
      [](py::function c, py::function body, py::object vars, int64_t max_iter) {
        std::vector<Tensor> out = while_loop(
            [&c](const std::vector<Tensor>& v) {
              py::object r = c(*tuple_of(v));
              return py::isinstance<Tensor>(r) ? r.cast<Tensor>() : tensor_from_object(r);
            },
            [&body](const std::vector<Tensor>& v) {
              return tensors_of(body(*tuple_of(v)), "while_loop");
            },
            tensors_of(vars, "while_loop"), WhileOptions{max_iter});
        return tuple_of(out);
      },
      py::arg("cond"), py::arg("body"), py::arg("loop_vars"), py::arg("max_iterations") = -1,
      "while cond(*vars): vars = body(*vars); returns the final vars as a tuple.");

  init_index_shape(m, cls);
}

}  // namespace kiln::python
