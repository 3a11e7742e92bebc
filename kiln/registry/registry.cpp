// The op registry and attribute helpers.
#include <memory>
#include <sstream>

#include "kiln/registry/op_def.h"

namespace kiln::detail {

OpRegistry& OpRegistry::get() {
  static OpRegistry* r = new OpRegistry();
  return *r;
}

const OpDef& OpRegistry::add(OpDef def) {
  if (find(def.name)) fail("registry", "op '", def.name, "' is registered twice");
  if (!def.infer) fail("registry", "op '", def.name, "' has no shape inference");
  if (!def.kernel && !def.view && !def.has(kControlFlow))
    fail("registry", "op '", def.name, "' has neither a kernel nor a view function");
  ops_.push_back(std::make_unique<OpDef>(std::move(def)));
  return *ops_.back();
}

const OpDef* OpRegistry::find(std::string_view name) const {
  for (const auto& o : ops_)
    if (o->name == name) return o.get();
  return nullptr;
}

const OpDef& OpRegistry::at(std::string_view name) const {
  const OpDef* d = find(name);
  if (!d) fail("registry", "no op named '", std::string(name), "'");
  return *d;
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> v;
  for (const auto& o : ops_) v.push_back(o.get());
  return v;
}

size_t Attrs::hash() const {
  size_t h = v_.size();
  auto mix = [&](size_t x) { h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (const auto& a : v_) {
    mix(a.index());
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            for (auto e : x) mix(std::hash<int64_t>()(e));
          } else {
            mix(std::hash<T>()(x));
          }
        },
        a);
  }
  return h;
}

void GradCtx::stale_input(size_t k) const {
  fail("backward", "input ", k, " of op '", op.name,
       "' was modified in place after it was saved for the gradient");
}

void Attrs::bad(size_t k, const char* what) const {
  if (k >= v_.size())
    throw AttrError(
        str_cat("attribute ", k, " is missing (", v_.size(), " given), expected ", what));
  static const char* const kinds[] = {"an integer", "a double", "a bool", "an integer list",
                                      "a string"};
  throw AttrError(str_cat("attribute ", k, " is ", kinds[v_[k].index()], ", expected ", what));
}

void Attrs::set_int(size_t k, int elem, int64_t v) {
  if (elem < 0) {
    if (k >= v_.size() || !std::holds_alternative<int64_t>(v_[k])) bad(k, "an integer");
    v_[k] = v;
    return;
  }
  if (k >= v_.size() || !std::holds_alternative<std::vector<int64_t>>(v_[k]))
    bad(k, "an integer list");
  auto& l = std::get<std::vector<int64_t>>(v_[k]);
  if (static_cast<size_t>(elem) >= l.size())
    throw AttrError(str_cat("attribute ", k, " has ", l.size(), " elements, no element ", elem));
  l[static_cast<size_t>(elem)] = v;
}

void check_attr_count(const OpDef& op, const Attrs& a) {
  if (op.attr_names.empty() || a.size() == op.attr_names.size()) return;
  std::string names;
  for (const auto& n : op.attr_names) names += (names.empty() ? "" : ", ") + n;
  fail(op.name.c_str(), "takes ", op.attr_names.size(), " attributes (", names, "), got ", a.size(),
       " (", a.str(op.attr_names), ")");
}

void attr_fail(const OpDef& op, const Attrs& a, const AttrError& e) {
  fail(op.name.c_str(), "bad attributes (", a.str(op.attr_names), "): ", e.what());
}

std::string Attrs::str(const std::vector<std::string>& names) const {
  std::ostringstream os;
  for (size_t k = 0; k < v_.size(); ++k) {
    if (k) os << ", ";
    os << (k < names.size() ? names[k] : "attr" + std::to_string(k)) << "=";
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            os << "[";
            for (size_t i = 0; i < x.size(); ++i) os << (i ? ", " : "") << x[i];
            os << "]";
          } else if constexpr (std::is_same_v<T, bool>) {
            os << (x ? "true" : "false");
          } else {
            os << x;
          }
        },
        v_[k]);
  }
  return os.str();
}

}  // namespace kiln::detail
