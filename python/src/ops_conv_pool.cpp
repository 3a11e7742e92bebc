// Convolution, pooling, resampling, functional norms and attention as kiln.<op>(...) with
// torch.nn.functional's argument names and defaults: padding='same' / 'valid', return_indices,
// ceil_mode, count_include_pad, divisor_override, scale_factor, attn_mask. Option handling
// (torch's int-or-tuple arguments, None entries) happens here; the ops are kiln/ops' functions.
#include "common.h"

namespace kiln::python {
namespace {

using Ints = std::vector<int64_t>;

Tensor opt_t(py::handle h) { return h.is_none() ? Tensor() : h.cast<Tensor>(); }

// n values from an int or a sequence of 1 or n ints.
Ints n_of(py::handle h, size_t n, const char* what) {
  Ints v = ints_from(h, what);
  if (v.size() == 1) v.assign(n, v[0]);
  return v;
}

// torch's padding strings: "valid" is no padding; "same" pads dilation (k - 1) in total per dim,
// the odd unit after (the input is padded first for that, as torch does).
std::pair<Tensor, Ints> conv_padding(const char* op, const Tensor& x, const Tensor& w,
                                     py::handle padding, const Ints& stride, const Ints& dilation,
                                     size_t nd) {
  if (!py::isinstance<py::str>(padding)) return {x, n_of(padding, nd, op)};
  const std::string s = padding.cast<std::string>();
  if (s == "valid") return {x, Ints(nd, 0)};
  if (s != "same")
    fail(op, "padding must be an int, a tuple of ints, 'valid' or 'same', got '", s, "'");
  for (int64_t v : stride)
    if (v != 1) fail(op, "padding='same' is not supported for strided convolutions");
  if (w.dim() != static_cast<int64_t>(nd) + 2)
    fail(op, "weight must be ", nd + 2, "-D, got shape ", w.shape());
  Ints left(nd), extra;
  bool odd = false;
  for (size_t i = 0; i < nd; ++i) {
    const int64_t k = w.size(static_cast<int64_t>(i) + 2);
    const int64_t d = dilation.size() == 1 ? dilation[0] : dilation[i];
    const int64_t total = d * (k - 1);
    left[i] = total / 2;
    odd = odd || total % 2 != 0;
  }
  if (!odd) return {x, left};
  // F.pad order: last dim first
  for (size_t i = nd; i-- > 0;) {
    const int64_t k = w.size(static_cast<int64_t>(i) + 2);
    const int64_t d = dilation.size() == 1 ? dilation[0] : dilation[i];
    const int64_t total = d * (k - 1);
    extra.push_back(0);
    extra.push_back(total - 2 * left[i]);
  }
  return {pad(x, extra), left};
}

// Adaptive output sizes: None keeps the input's size (torch).
Ints adaptive_size(py::handle h, const Tensor& x, size_t nd, const char* op) {
  if (!x.defined()) fail(op, "input is an undefined tensor");
  Ints out;
  if (py::isinstance<py::int_>(h)) return Ints(nd, h.cast<int64_t>());
  for (py::handle e : h) {
    const size_t i = out.size();
    if (e.is_none()) {
      if (x.dim() < static_cast<int64_t>(nd)) fail(op, "input shape ", x.shape(), " is too small");
      out.push_back(x.size(x.dim() - static_cast<int64_t>(nd) + static_cast<int64_t>(i)));
    } else {
      out.push_back(e.cast<int64_t>());
    }
  }
  if (out.size() == 1) out.assign(nd, out[0]);
  return out;
}

py::object values_or_pair(std::pair<Tensor, Tensor> r, bool with_indices) {
  if (with_indices) return py::make_tuple(r.first, r.second);
  return py::cast(r.first);
}

}  // namespace

void init_ops_conv_pool(py::module_& m, TensorClass& cls) {
  (void)cls;
  // ---- convolution ----
  m.def(
      "conv1d",
      [](const Tensor& x, const Tensor& w, py::object b, py::object stride, py::object padding,
         py::object dilation, int64_t groups) {
        const Ints s = n_of(stride, 1, "conv1d"), d = n_of(dilation, 1, "conv1d");
        auto [xp, p] = conv_padding("conv1d", x, w, padding, s, d, 1);
        Tensor bt = opt_t(b);  // (Python objects are read before the GIL is released)
        MaybeNoGil g(xp.is_concrete());
        return conv1d(xp, w, bt, s[0], p[0], d[0], groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1,
      "x [N, C, L] (or [C, L]), w [O, C/groups, K]; padding an int, 'valid' or 'same'.");
  m.def(
      "conv2d",
      [](const Tensor& x, const Tensor& w, py::object b, py::object stride, py::object padding,
         py::object dilation, int64_t groups) {
        const Ints s = n_of(stride, 2, "conv2d"), d = n_of(dilation, 2, "conv2d");
        auto [xp, p] = conv_padding("conv2d", x, w, padding, s, d, 2);
        Tensor bt = opt_t(b);
        MaybeNoGil g(xp.is_concrete());
        if (xp.dim() == 3) return squeeze(conv2d(unsqueeze(xp, 0), w, bt, s, p, d, groups), 0);
        return conv2d(xp, w, bt, s, p, d, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1,
      "x [N, C, H, W] (or [C, H, W]), w [O, C/groups, kH, kW]; padding ints, 'valid' or 'same'.");
  m.def(
      "conv3d",
      [](const Tensor& x, const Tensor& w, py::object b, py::object stride, py::object padding,
         py::object dilation, int64_t groups) {
        const Ints s = n_of(stride, 3, "conv3d"), d = n_of(dilation, 3, "conv3d");
        auto [xp, p] = conv_padding("conv3d", x, w, padding, s, d, 3);
        Tensor bt = opt_t(b);
        MaybeNoGil g(xp.is_concrete());
        return conv3d(xp, w, bt, s, p, d, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1,
      "x [N, C, D, H, W] (or [C, D, H, W]), w [O, C/groups, kD, kH, kW].");
  m.def(
      "conv_transpose1d",
      [](const Tensor& x, const Tensor& w, py::object b, int64_t stride, int64_t padding,
         int64_t output_padding, int64_t groups, int64_t dilation) {
        Tensor bt = opt_t(b);
        MaybeNoGil g(x.is_concrete());
        return conv_transpose1d(x, w, bt, stride, padding, output_padding, dilation, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("groups") = 1,
      py::arg("dilation") = 1);
  m.def(
      "conv_transpose3d",
      [](const Tensor& x, const Tensor& w, py::object b, py::object stride, py::object padding,
         py::object output_padding, int64_t groups, py::object dilation) {
        const Ints s = n_of(stride, 3, "conv_transpose3d"),
                   p = n_of(padding, 3, "conv_transpose3d"),
                   o = n_of(output_padding, 3, "conv_transpose3d"),
                   d = n_of(dilation, 3, "conv_transpose3d");
        Tensor bt = opt_t(b);
        MaybeNoGil g(x.is_concrete());
        return conv_transpose3d(x, w, bt, s, p, o, d, groups);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("groups") = 1,
      py::arg("dilation") = 1);

  // ---- pooling ----
  using MaxFn = std::pair<Tensor, Tensor> (*)(const Tensor&, Ints, Ints, Ints, Ints, bool);
  struct MaxDef {
    const char* name;
    const char* with_indices;
    size_t nd;
    MaxFn fn;
  };
  for (const MaxDef& def :
       {MaxDef{"max_pool1d", "max_pool1d_with_indices", 1, &max_pool1d_with_indices},
        MaxDef{"max_pool2d", "max_pool2d_with_indices", 2, &max_pool2d_with_indices},
        MaxDef{"max_pool3d", "max_pool3d_with_indices", 3, &max_pool3d_with_indices}}) {
    auto run = [def](const Tensor& x, py::object k, py::object s, py::object p, py::object d,
                     bool ceil) {
      const Ints kk = n_of(k, def.nd, def.name), pp = n_of(p, def.nd, def.name),
                 dd = n_of(d, def.nd, def.name);
      const Ints ss = s.is_none() ? Ints{} : n_of(s, def.nd, def.name);
      MaybeNoGil g(x.is_concrete());
      // (2-D without indices, dilation or ceil_mode: the fast max_pool2d)
      if (def.nd == 2) return std::pair{max_pool2d(x, kk, ss, pp, dd, ceil), Tensor()};
      return def.fn(x, kk, ss, pp, dd, ceil);
    };
    m.def(
        def.name,
        [def, run](const Tensor& x, py::object k, py::object s, py::object p, py::object d,
                   bool ceil, bool ret) {
          if (!ret) return py::cast(run(x, k, s, p, d, ceil).first);
          const Ints kk = n_of(k, def.nd, def.name), pp = n_of(p, def.nd, def.name),
                     dd = n_of(d, def.nd, def.name);
          const Ints ss = s.is_none() ? Ints{} : n_of(s, def.nd, def.name);
          return values_or_pair(def.fn(x, kk, ss, pp, dd, ceil), true);
        },
        py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("ceil_mode") = false,
        py::arg("return_indices") = false,
        "Max pooling (torch.nn.functional); return_indices also gives the flat argmax per plane.");
    m.def(
        def.with_indices,
        [def](const Tensor& x, py::object k, py::object s, py::object p, py::object d, bool ceil) {
          const Ints kk = n_of(k, def.nd, def.name), pp = n_of(p, def.nd, def.name),
                     dd = n_of(d, def.nd, def.name);
          const Ints ss = s.is_none() ? Ints{} : n_of(s, def.nd, def.name);
          return values_or_pair(def.fn(x, kk, ss, pp, dd, ceil), true);
        },
        py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("ceil_mode") = false);
  }
  m.def(
      "avg_pool1d",
      [](const Tensor& x, py::object k, py::object s, py::object p, bool ceil, bool cip) {
        const Ints ss = s.is_none() ? Ints{} : n_of(s, 1, "avg_pool1d");
        const Ints kk = n_of(k, 1, "avg_pool1d"), pp = n_of(p, 1, "avg_pool1d");
        MaybeNoGil g(x.is_concrete());
        return avg_pool1d(x, kk, ss, pp, ceil, cip);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0, py::arg("ceil_mode") = false, py::arg("count_include_pad") = true);
  m.def(
      "avg_pool2d",
      [](const Tensor& x, py::object k, py::object s, py::object p, bool ceil, bool cip,
         py::object div) {
        const Ints ss = s.is_none() ? Ints{} : n_of(s, 2, "avg_pool2d");
        const int64_t dv = div.is_none() ? 0 : div.cast<int64_t>();
        if (!div.is_none() && dv <= 0) fail("avg_pool2d", "divisor must be not zero, got ", dv);
        const Ints kk = n_of(k, 2, "avg_pool2d"), pp = n_of(p, 2, "avg_pool2d");
        MaybeNoGil g(x.is_concrete());
        return avg_pool2d(x, kk, ss, pp, ceil, cip, dv);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0, py::arg("ceil_mode") = false, py::arg("count_include_pad") = true,
      py::arg("divisor_override") = py::none());
  m.def(
      "avg_pool3d",
      [](const Tensor& x, py::object k, py::object s, py::object p, bool ceil, bool cip,
         py::object div) {
        const Ints ss = s.is_none() ? Ints{} : n_of(s, 3, "avg_pool3d");
        const int64_t dv = div.is_none() ? 0 : div.cast<int64_t>();
        if (!div.is_none() && dv <= 0) fail("avg_pool3d", "divisor must be not zero, got ", dv);
        const Ints kk = n_of(k, 3, "avg_pool3d"), pp = n_of(p, 3, "avg_pool3d");
        MaybeNoGil g(x.is_concrete());
        return avg_pool3d(x, kk, ss, pp, ceil, cip, dv);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0, py::arg("ceil_mode") = false, py::arg("count_include_pad") = true,
      py::arg("divisor_override") = py::none());
  using UnpoolFn = Tensor (*)(const Tensor&, const Tensor&, Ints, Ints, Ints, Ints);
  for (auto [name, nd, fn] : {std::tuple{"max_unpool1d", size_t(1), UnpoolFn(&max_unpool1d)},
                              std::tuple{"max_unpool2d", size_t(2), UnpoolFn(&max_unpool2d)},
                              std::tuple{"max_unpool3d", size_t(3), UnpoolFn(&max_unpool3d)}}) {
    m.def(
        name,
        [name, nd, fn](const Tensor& x, const Tensor& idx, py::object k, py::object s, py::object p,
                       py::object os) {
          const Ints ss = s.is_none() ? Ints{} : n_of(s, nd, name);
          const Ints oo = os.is_none() ? Ints{} : ints_from(os, name);
          return fn(x, idx, n_of(k, nd, name), ss, n_of(p, nd, name), oo);
        },
        py::arg("input"), py::arg("indices"), py::arg("kernel_size"),
        py::arg("stride") = py::none(), py::arg("padding") = 0,
        py::arg("output_size") = py::none());
  }
  using LpFn = Tensor (*)(const Tensor&, double, Ints, Ints, bool);
  for (auto [name, nd, fn] : {std::tuple{"lp_pool1d", size_t(1), LpFn(&lp_pool1d)},
                              std::tuple{"lp_pool2d", size_t(2), LpFn(&lp_pool2d)}}) {
    m.def(
        name,
        [name, nd, fn](const Tensor& x, double p, py::object k, py::object s, bool ceil) {
          const Ints ss = s.is_none() ? Ints{} : n_of(s, nd, name);
          return fn(x, p, n_of(k, nd, name), ss, ceil);
        },
        py::arg("input"), py::arg("norm_type"), py::arg("kernel_size"),
        py::arg("stride") = py::none(), py::arg("ceil_mode") = false);
  }
  using AvgAdFn = Tensor (*)(const Tensor&, Ints);
  for (auto [name, nd, fn] :
       {std::tuple{"adaptive_avg_pool1d", size_t(1), AvgAdFn(&adaptive_avg_pool1d)},
        std::tuple{"adaptive_avg_pool2d", size_t(2), AvgAdFn(&adaptive_avg_pool2d)},
        std::tuple{"adaptive_avg_pool3d", size_t(3), AvgAdFn(&adaptive_avg_pool3d)}}) {
    m.def(
        name,
        [name, nd, fn](const Tensor& x, py::object size) {
          Ints o = adaptive_size(size, x, nd, name);
          MaybeNoGil g(x.is_concrete());
          return fn(x, o);
        },
        py::arg("input"), py::arg("output_size"));
  }
  using MaxAdFn = std::pair<Tensor, Tensor> (*)(const Tensor&, Ints);
  for (auto [name, with, nd, fn] :
       {std::tuple{"adaptive_max_pool1d", "adaptive_max_pool1d_with_indices", size_t(1),
                   MaxAdFn(&adaptive_max_pool1d_with_indices)},
        std::tuple{"adaptive_max_pool2d", "adaptive_max_pool2d_with_indices", size_t(2),
                   MaxAdFn(&adaptive_max_pool2d_with_indices)},
        std::tuple{"adaptive_max_pool3d", "adaptive_max_pool3d_with_indices", size_t(3),
                   MaxAdFn(&adaptive_max_pool3d_with_indices)}}) {
    m.def(
        name,
        [name, nd, fn](const Tensor& x, py::object size, bool ret) {
          Ints o = adaptive_size(size, x, nd, name);
          return values_or_pair(fn(x, o), ret);
        },
        py::arg("input"), py::arg("output_size"), py::arg("return_indices") = false);
    m.def(
        with,
        [name, nd, fn](const Tensor& x, py::object size) {
          Ints o = adaptive_size(size, x, nd, name);
          return values_or_pair(fn(x, o), true);
        },
        py::arg("input"), py::arg("output_size"));
  }

  // ---- resampling ----
  m.def(
      "interpolate",
      [](const Tensor& x, py::object size, py::object scale, const std::string& mode,
         py::object align, py::object recompute, bool antialias) {
        if (antialias) fail("interpolate", "antialias=True is not supported");
        if (size.is_none() == scale.is_none())
          fail("interpolate", "exactly one of size and scale_factor must be given");
        Ints sz;
        std::vector<double> sf;
        if (!size.is_none()) sz = ints_from(size, "interpolate");
        if (!scale.is_none()) {
          if (py::isinstance<py::sequence>(scale))
            for (py::handle e : scale) sf.push_back(e.cast<double>());
          else
            sf.push_back(scale.cast<double>());
        }
        const bool ac = !align.is_none() && align.cast<bool>();
        if (!align.is_none() && (mode == "nearest" || mode == "nearest-exact" || mode == "area"))
          fail("interpolate",
               "align_corners option can only be set with the interpolating modes: linear | "
               "bilinear | bicubic | trilinear (mode \"",
               mode, "\")");
        const bool rc = !recompute.is_none() && recompute.cast<bool>();
        MaybeNoGil g(x.is_concrete());
        return interpolate(x, sz, mode, ac, sf, rc);
      },
      py::arg("input"), py::arg("size") = py::none(), py::arg("scale_factor") = py::none(),
      py::arg("mode") = "nearest", py::arg("align_corners") = py::none(),
      py::arg("recompute_scale_factor") = py::none(), py::arg("antialias") = false,
      "torch.nn.functional.interpolate over [N, C, L], [N, C, H, W] or [N, C, D, H, W].");
  m.def(
      "grid_sample",
      [](const Tensor& x, const Tensor& grid, const std::string& mode,
         const std::string& padding_mode, py::object align) {
        // torch 1.13 warns and takes False for None.
        const bool ac = !align.is_none() && align.cast<bool>();
        MaybeNoGil g(x.is_concrete() && grid.is_concrete());
        return grid_sample(x, grid, mode, padding_mode, ac);
      },
      py::arg("input"), py::arg("grid"), py::arg("mode") = "bilinear",
      py::arg("padding_mode") = "zeros", py::arg("align_corners") = py::none(),
      "torch.nn.functional.grid_sample over [N, C, H, W] with grid [N, H_out, W_out, 2].");
  m.def(
      "roi_align",
      [](const Tensor& x, const Tensor& boxes, py::object output_size, double spatial_scale,
         int64_t sampling_ratio, bool aligned) {
        std::vector<int64_t> os;
        if (py::isinstance<py::int_>(output_size))
          os = {output_size.cast<int64_t>()};
        else
          os = output_size.cast<std::vector<int64_t>>();
        MaybeNoGil g(x.is_concrete() && boxes.is_concrete());
        return roi_align(x, boxes, os, spatial_scale, sampling_ratio, aligned);
      },
      py::arg("input"), py::arg("boxes"), py::arg("output_size"), py::arg("spatial_scale") = 1.0,
      py::arg("sampling_ratio") = -1, py::arg("aligned") = false,
      "torchvision.ops.roi_align with boxes [K, 5] (batch index, x1, y1, x2, y2).");
  m.def(
      "nms",
      [](const Tensor& boxes, const Tensor& scores, double iou_threshold) {
        MaybeNoGil g(boxes.is_concrete() && scores.is_concrete());
        return nms(boxes, scores, iou_threshold);
      },
      py::arg("boxes"), py::arg("scores"), py::arg("iou_threshold"),
      "torchvision.ops.nms: indices of the boxes [N, 4] kept, by decreasing score.");
  m.def(
      "pixel_shuffle", [](const Tensor& x, int64_t r) { return pixel_shuffle(x, r); },
      py::arg("input"), py::arg("upscale_factor"));
  m.def(
      "pixel_unshuffle", [](const Tensor& x, int64_t r) { return pixel_unshuffle(x, r); },
      py::arg("input"), py::arg("downscale_factor"));
  // (private names: Tensor.unfold is another op in torch; kiln.nn.functional.unfold / fold)
  m.def(
      "_unfold",
      [](const Tensor& x, py::object k, py::object d, py::object p, py::object s) {
        const Ints kk = n_of(k, 2, "unfold"), dd = n_of(d, 2, "unfold"), pp = n_of(p, 2, "unfold"),
                   ss = n_of(s, 2, "unfold");
        MaybeNoGil g(x.is_concrete());
        return unfold(x, kk, dd, pp, ss);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("dilation") = 1, py::arg("padding") = 0,
      py::arg("stride") = 1);
  m.def(
      "_fold",
      [](const Tensor& x, py::object os, py::object k, py::object d, py::object p, py::object s) {
        const Ints oo = n_of(os, 2, "fold"), kk = n_of(k, 2, "fold"), dd = n_of(d, 2, "fold"),
                   pp = n_of(p, 2, "fold"), ss = n_of(s, 2, "fold");
        MaybeNoGil g(x.is_concrete());
        return fold(x, oo, kk, dd, pp, ss);
      },
      py::arg("input"), py::arg("output_size"), py::arg("kernel_size"), py::arg("dilation") = 1,
      py::arg("padding") = 0, py::arg("stride") = 1);

  // ---- functional norms ----
  m.def(
      "group_norm",
      [](const Tensor& x, int64_t groups, py::object w, py::object b, double eps) {
        return group_norm(x, groups, opt_t(w), opt_t(b), eps);
      },
      py::arg("input"), py::arg("num_groups"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  m.def(
      "instance_norm",
      [](const Tensor& x, py::object rm, py::object rv, py::object w, py::object b, bool use,
         double momentum, double eps) {
        return instance_norm(x, opt_t(rm), opt_t(rv), opt_t(w), opt_t(b), use, momentum, eps);
      },
      py::arg("input"), py::arg("running_mean") = py::none(), py::arg("running_var") = py::none(),
      py::arg("weight") = py::none(), py::arg("bias") = py::none(),
      py::arg("use_input_stats") = true, py::arg("momentum") = 0.1, py::arg("eps") = 1e-5);
  m.def(
      "local_response_norm",
      [](const Tensor& x, int64_t size, double alpha, double beta, double k) {
        return local_response_norm(x, size, alpha, beta, k);
      },
      py::arg("input"), py::arg("size"), py::arg("alpha") = 1e-4, py::arg("beta") = 0.75,
      py::arg("k") = 1.0);

  // ---- attention ----
  m.def(
      "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, py::object mask, double dropout_p,
         bool causal, py::object scale) {
        // (Kiln's earlier signature took is_causal fourth)
        if (py::isinstance<py::bool_>(mask)) {
          causal = causal || mask.cast<bool>();
          mask = py::none();
        }
        const double sc = scale.is_none() ? 0.0 : scale.cast<double>();
        Tensor mt = opt_t(mask);
        MaybeNoGil g(q.is_concrete());
        return scaled_dot_product_attention(q, k, v, mt, dropout_p, causal, sc, true);
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
      py::arg("dropout_p") = 0.0, py::arg("is_causal") = false, py::arg("scale") = py::none(),
      "softmax(scale q k^T + mask) v; attn_mask bool (True = attend) or additive float; "
      "without a mask or dropout one fused kernel each way.");
}

}  // namespace kiln::python
