// Shape and copy ops as functions (kiln.reshape, cat, split, ...), the state ops of graphs
// (print, assign, group) and control flow as dataflow (switch_, merge, cond, while_loop) with
// Python callables as branches and loop bodies.
#include "common.h"

namespace kiln::python {
namespace {

std::vector<Tensor> tensors_of(py::handle h, const char* what) {
  if (py::isinstance<Tensor>(h)) return {h.cast<Tensor>()};
  if (!PySequence_Check(h.ptr()))
    raise(type_error_type(), str_cat("[", what, "] expected a tensor or a sequence of tensors"));
  std::vector<Tensor> out;
  for (py::handle e : py::reinterpret_borrow<py::sequence>(h)) {
    if (!py::isinstance<Tensor>(e))
      raise(type_error_type(),
            str_cat("[", what, "] expected tensors, got ",
                    py::str(py::type::handle_of(e).attr("__name__")).cast<std::string>()));
    out.push_back(e.cast<Tensor>());
  }
  return out;
}

py::tuple tuple_of(const std::vector<Tensor>& v) {
  py::tuple t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = py::cast(v[i]);
  return t;
}

}  // namespace

void init_ops_shape(py::module_& m, TensorClass& cls) {
  m.def(
      "reshape",
      [](const Tensor& a, py::object s) { return reshape(a, Shape(ints_from(s, "reshape"))); },
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
      "expand", [](const Tensor& a, py::object s) { return expand(a, shape_from(s)); },
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
}

}  // namespace kiln::python
