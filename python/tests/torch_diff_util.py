"""The engine of the differential suite against torch 1.13 (python/tests/test_torch_diff_*.py):
case specs (tensors of a dtype, shape and value domain; Python scalars), running one case through
kiln and torch, classifying the outcome, the documented-differences table of
docs/torch_differences.md and the counts that python/tools/torch_diff_report.py prints."""
import functools
import math
import operator
import os
import re
import zlib

import numpy as np

import kiln

try:
    import torch
except ImportError:  # the test files skip; the report script says so
    torch = None

DTYPES = ["bool", "int32", "int64", "float32", "float64", "bfloat16"]
FLOATS = ["float32", "float64", "bfloat16"]
INTS = ["int32", "int64"]
CODE = {"bool": "b", "int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64",
        "bfloat16": "bf16", "int8": "i8", "uint8": "u8", "int16": "i16", "float16": "f16"}
NP = {"bool": np.bool_, "int32": np.int32, "int64": np.int64, "float32": np.float32,
      "float64": np.float64, "int8": np.int8, "uint8": np.uint8, "int16": np.int16}

ROOT = os.environ.get("KILN_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
DOC = os.path.join(ROOT, "docs", "torch_differences.md")

# Shape sets: (2,3) plain; () 0-d; (0,3) empty. Binary pairs add broadcasting.
UNARY_SHAPES = [(2, 3), (), (0, 3)]
BINARY_SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2, 3)), ((2, 3), ()),
                 ((0, 3), (3,)), ((), ())]


# ---- argument specs -----------------------------------------------------------------------------

class T:
    """A tensor argument: shape, dtype, value domain (any, pos, nonzero, unit, ge1, small, nonneg,
    prob, idx:<n>, perm) or explicit values; grad marks it requires_grad (float dtypes only)."""

    def __init__(self, shape, dtype="float32", dom="any", grad=False, values=None):
        self.shape, self.dtype, self.dom, self.grad = tuple(shape), dtype, dom, grad
        self.values = None if values is None else np.asarray(values)
        if self.values is not None:
            self.shape = self.values.shape

    def sig(self):
        s = CODE[self.dtype] + "[" + ",".join(map(str, self.shape)) + "]"
        if self.values is not None:
            s += "=" + ",".join(f"{v:g}" for v in self.values.astype(np.float64).ravel()[:6])
        return s


class L:
    """A list (or tuple) of argument specs, e.g. the tensors of cat."""

    def __init__(self, *items, tuple_=False):
        self.items, self.tuple_ = list(items), tuple_

    def sig(self):
        return "[" + ",".join(sig(a) for a in self.items) + "]"


class D:
    """A dtype argument, by name (kiln.<name> / torch.<name>)."""

    def __init__(self, name):
        self.name = name

    def sig(self):
        return "dt:" + CODE.get(self.name, self.name)


def sig(a):
    if hasattr(a, "sig"):
        return a.sig()
    if isinstance(a, bool):
        return f"b:{a}"
    if isinstance(a, int):
        return f"i:{a}"
    if isinstance(a, float):
        return f"f:{a:g}"
    if isinstance(a, (tuple, list)):
        return "(" + ",".join(sig(x) for x in a) + ")"
    return repr(a)


def domain_values(rng, shape, dtype, dom):
    """float64 values every dtype holds exactly (multiples of 1/8 under 4 are exact in bf16)."""
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        v = rng.randint(0, 2, n).astype(np.float64)
        if dom in ("pos", "nonzero", "ge1"):
            v[:] = 1
    elif dom.startswith("idx:"):
        v = rng.randint(0, int(dom[4:]), n).astype(np.float64)
    elif dom == "perm":
        v = rng.permutation(n).astype(np.float64)
    elif dom in ("wc", "spd"):
        # square matrices in the last two dims: well conditioned, or symmetric positive definite
        n = shape[-1]
        a = rng.randint(-8, 9, shape) / 8.0
        if dom == "spd":
            a = a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
        else:
            a = a + 3 * np.eye(n)
        return a
    elif dtype in INTS or dtype in ("int8", "int16", "uint8"):
        lo, hi = {"any": (-5, 6), "pos": (1, 6), "nonzero": (1, 6), "unit": (-1, 2),
                  "ge1": (1, 5), "small": (0, 4), "nonneg": (0, 6), "prob": (0, 2)}[dom]
        v = rng.randint(lo, hi, n).astype(np.float64)
        if dom == "nonzero":
            v *= rng.choice([-1, 1], n)
    else:
        k = {"any": lambda: rng.randint(-24, 25, n) / 8.0,
             "pos": lambda: rng.randint(1, 25, n) / 8.0,
             "nonzero": lambda: rng.randint(1, 25, n) / 8.0 * rng.choice([-1, 1], n),
             "unit": lambda: rng.randint(-14, 15, n) / 16.0,
             "ge1": lambda: 1.0 + rng.randint(1, 17, n) / 8.0,
             "small": lambda: rng.randint(0, 13, n) / 4.0,
             "nonneg": lambda: rng.randint(0, 25, n) / 8.0,
             "prob": lambda: rng.randint(1, 16, n) / 16.0}[dom]
        v = k()
    return v.reshape(shape)


class Lib:
    """The names a case calls, for one framework: top (kiln/torch), F (nn.functional), linalg,
    and dtype(name)."""

    def __init__(self, is_kiln):
        self.is_kiln = is_kiln
        if is_kiln:
            import kiln.nn
            import kiln.linalg
            self.top, self.F, self.linalg, self.nn = kiln, kiln.nn.functional, kiln.linalg, kiln.nn
        else:
            self.top, self.F, self.linalg, self.nn = (torch, torch.nn.functional, torch.linalg,
                                                      torch.nn)

    def dtype(self, name):
        return getattr(self.top, name)

    def __getattr__(self, name):  # m.add, m.zeros...
        return getattr(self.top, name)


def make_tensor(lib, values, dtype, grad=False):
    if lib.is_kiln:
        if dtype == "bfloat16":
            t = kiln.tensor(values.astype(np.float32)).to(kiln.bfloat16)
        else:
            t = kiln.tensor(np.ascontiguousarray(values.astype(NP[dtype])))
            if t.dtype != getattr(kiln, dtype):
                raise AssertionError(f"kiln.tensor of {dtype} numpy gave {t.dtype}")
    else:
        if dtype == "bfloat16":
            t = torch.from_numpy(values.astype(np.float32)).to(torch.bfloat16)
        else:
            t = torch.from_numpy(np.ascontiguousarray(values.astype(NP[dtype])))
    if grad:
        t.requires_grad_(True)
    return t


def materialize(lib, a, rng_vals, leaves):
    if isinstance(a, T):
        t = make_tensor(lib, rng_vals[id(a)], a.dtype, a.grad)
        if a.grad:
            leaves.append(t)
        return t
    if isinstance(a, L):
        items = [materialize(lib, x, rng_vals, leaves) for x in a.items]
        return tuple(items) if a.tuple_ else items
    if isinstance(a, D):
        return lib.dtype(a.name)
    return a


def _walk(a):
    if isinstance(a, T):
        yield a
    elif isinstance(a, L):
        for x in a.items:
            yield from _walk(x)
    elif isinstance(a, dict):
        for x in a.values():
            yield from _walk(x)
    elif isinstance(a, (list, tuple)):
        for x in a:
            yield from _walk(x)


# ---- cases --------------------------------------------------------------------------------------

class Case:
    """One call compared: fn is 'name' (kiln.name / torch.name), 'F.name', 'linalg.name',
    '.name' (a method of the first argument), 'op:name' (operator.name), or a callable (m, *args)
    given a Lib. ops: the registry ops it exercises (default: the call's last name). group: the
    pytest item it runs in. tol: (rtol, atol) over the dtype defaults."""

    def __init__(self, fn, args=(), kwargs=None, name=None, ops=None, group=None, tol=None,
                 grad=None, tag="", mode="eager"):
        self.fn, self.args, self.kwargs = fn, list(args), dict(kwargs or {})
        # eager, jit (kiln.jit), graph (placeholders and a Session) or autocast (both under
        # autocast("cpu", bfloat16))
        self.mode = mode
        if mode != "eager":
            tag = (tag + "-" if tag else "") + mode
            grad = False
        fname = fn if isinstance(fn, str) else (name or fn.__name__)
        self.name = name or fname
        base = self.name.split(":")[-1].split(".")[-1]
        self.ops = set(ops) if ops is not None else {base}
        self.group = group or self.name
        self.tol = tol
        self.grad = any(t.grad for t in _walk([self.args, self.kwargs])) if grad is None else grad
        kw = ",".join(f"{k}={sig(v)}" for k, v in sorted(self.kwargs.items()))
        self.id = f"{self.name}({','.join(sig(a) for a in self.args)}{';' + kw if kw else ''})"
        if tag:
            self.id += "#" + tag

    def repro(self):
        return self.id

    def in_kiln(self):
        """Whether kiln has the function (cases of torch names kiln lacks are not run:
        docs/pytorch_coverage.md lists those)."""
        fn = self.fn
        if callable(fn) or fn.startswith("op:"):
            return True
        if fn.startswith("."):
            return hasattr(kiln.Tensor, fn[1:])
        obj = Lib(True)
        for part in fn.split("."):
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True

    def call(self, lib):
        rng = np.random.RandomState(zlib.crc32(self.id.encode()) & 0x7FFFFFFF)
        vals = {}
        for t in _walk([self.args, self.kwargs]):
            vals[id(t)] = t.values if t.values is not None else \
                domain_values(rng, t.shape, t.dtype, t.dom)
        leaves = []
        args = [materialize(lib, a, vals, leaves) for a in self.args]
        kwargs = {k: materialize(lib, v, vals, leaves) for k, v in self.kwargs.items()}
        if self.mode == "autocast":
            with lib.autocast("cpu", dtype=lib.bfloat16):
                return self._invoke(lib, args, kwargs), leaves
        if lib.is_kiln and self.mode != "eager":
            return self._call_traced(lib, args, kwargs), leaves
        return self._invoke(lib, args, kwargs), leaves

    def _call_traced(self, lib, args, kwargs):
        """The call with its tensor arguments (in lists and keywords too) traced: through
        kiln.jit, or as placeholders of a Graph run by a Session; the graph's inferred dtypes
        and shapes must be the results'."""
        concrete = _flat_tensors([args, list(kwargs.values())])

        def body(*ts):
            it = iter(ts)
            a = _rebuild(args, it)
            kw = dict(zip(kwargs, _rebuild(list(kwargs.values()), it)))
            return self._invoke(lib, list(a), kw)
        if self.mode == "jit":
            return kiln.jit(body)(*concrete)
        g = kiln.Graph()
        phs = [g.placeholder(t.dtype, list(t.shape)) for t in concrete]
        out = body(*phs)
        flat = _flat_tensors(out)
        res = kiln.Session(g).run(flat, dict(zip(phs, concrete)))
        for sym, r in zip(flat, res):
            if sym.dtype != r.dtype or tuple(sym.shape) != tuple(r.shape):
                raise InferMismatch(f"graph infers {dtype_name(sym.dtype)}{list(sym.shape)}, "
                                    f"runs to {dtype_name(r.dtype)}{list(r.shape)}")
        it = iter(res)
        return _rebuild(out, it)

    def _invoke(self, lib, args, kwargs):
        fn = self.fn
        if callable(fn):
            out = fn(lib, *args, **kwargs)
        elif fn.startswith("op:"):
            out = getattr(operator, fn[3:])(*args, **kwargs)
        elif fn.startswith("."):
            out = getattr(args[0], fn[1:])(*args[1:], **kwargs)
        else:
            obj = lib
            for part in fn.split("."):
                obj = getattr(obj, part)
            out = obj(*args, **kwargs)
        return out


class InferMismatch(Exception):
    """A graph's inferred dtype or shape is not what running it gives."""


def _rebuild(x, it):
    if is_tensor(x):
        return next(it)
    if isinstance(x, (tuple, list)):
        return type(x)(_rebuild(v, it) for v in x) if type(x) in (tuple, list) else \
            tuple(_rebuild(v, it) for v in x)
    return x


# ---- normalizing and comparing results ----------------------------------------------------------

def dtype_name(d):
    return str(d).split(".")[-1]


def is_tensor(x):
    return isinstance(x, kiln.Tensor) or (torch is not None and isinstance(x, torch.Tensor))


def to_numpy(x):
    x = x.detach()
    d = dtype_name(x.dtype)
    if d in ("bfloat16", "float16"):
        x = x.to(kiln.float32 if isinstance(x, kiln.Tensor) else torch.float32)
    if isinstance(x, kiln.Tensor):
        return np.asarray(x.numpy())
    return x.numpy()


def normalize(x):
    """A comparable form: ('T', dtype, shape, values) / ('N', kind, value) / ('S', items)."""
    if is_tensor(x):
        return ("T", dtype_name(x.dtype), tuple(x.shape), to_numpy(x))
    if isinstance(x, bool):
        return ("N", "bool", x)
    if isinstance(x, int):
        return ("N", "int", x)
    if isinstance(x, float):
        return ("N", "float", x)
    if isinstance(x, (tuple, list)):
        return ("S", [normalize(v) for v in x])
    if x is None:
        return ("N", "None", None)
    if hasattr(x, "name") or "dtype" in type(x).__name__:
        return ("N", "dtype", dtype_name(x))
    return ("N", type(x).__name__, repr(x))


DEFAULT_TOL = {"float64": (1e-9, 1e-12), "float32": (2e-5, 1e-6), "bfloat16": (1.6e-2, 1e-2),
               "float16": (2e-3, 1e-3)}


def compare(k, t, tol, path="out"):
    """None when equal, else (kind, detail)."""
    if k[0] != t[0]:
        return ("structure", f"{path}: kiln {k[0]} vs torch {t[0]}")
    if k[0] == "S":
        if len(k[1]) != len(t[1]):
            return ("structure", f"{path}: kiln {len(k[1])} results vs torch {len(t[1])}")
        for i, (a, b) in enumerate(zip(k[1], t[1])):
            r = compare(a, b, tol, f"{path}[{i}]")
            if r:
                return r
        return None
    if k[0] == "N":
        if k[1] != t[1]:
            return ("dtype", f"{path}: kiln {k[1]} {k[2]!r} vs torch {t[1]} {t[2]!r}")
        if k[1] == "float":
            if not (math.isclose(k[2], t[2], rel_tol=1e-6, abs_tol=1e-9) or
                    (math.isnan(k[2]) and math.isnan(t[2]))):
                return ("values", f"{path}: kiln {k[2]!r} vs torch {t[2]!r}")
        elif k[2] != t[2]:
            return ("values", f"{path}: kiln {k[2]!r} vs torch {t[2]!r}")
        return None
    _, kd, ks, kv = k
    _, td, ts, tv = t
    if kd != td:
        return ("dtype", f"{path}: kiln {kd} vs torch {td}")
    if ks != ts:
        return ("shape", f"{path}: kiln {ks} vs torch {ts}")
    if kv.shape != tv.shape:
        return ("shape", f"{path}: kiln values {kv.shape} vs torch {tv.shape}")
    if tv.dtype.kind in "biu":
        if not np.array_equal(kv, tv):
            return ("values", f"{path}: kiln {kv.ravel()[:8].tolist()} vs torch "
                              f"{tv.ravel()[:8].tolist()}")
        return None
    rtol, atol = tol or DEFAULT_TOL.get(td, (1e-6, 1e-7))
    with np.errstate(invalid="ignore"):
        ok = np.isclose(kv.astype(np.float64), tv.astype(np.float64), rtol=rtol, atol=atol,
                        equal_nan=True)
    if not ok.all():
        i = np.argwhere(~ok)[0]
        return ("values", f"{path}: at {tuple(i)} kiln {kv[tuple(i)]!r} vs torch "
                          f"{tv[tuple(i)]!r} (kiln {kv.ravel()[:6].tolist()} torch "
                          f"{tv.ravel()[:6].tolist()})")
    return None


def _flat_tensors(x):
    if is_tensor(x):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


def _backward(lib, out, leaves):
    """Backward of sum_k (out_k * w_k) with fixed weights w_k; the leaves' grads, normalized."""
    total = None
    for j, o in enumerate(_flat_tensors(out)):
        if not o.requires_grad or dtype_name(o.dtype) not in ("float32", "float64", "bfloat16"):
            continue
        n = int(np.prod(tuple(o.shape))) if len(tuple(o.shape)) else 1
        w = (np.arange(n, dtype=np.float64).reshape(tuple(o.shape)) % 5 - 1.5 + 0.25 * j)
        term = (o * make_tensor(lib, w, dtype_name(o.dtype))).sum()
        total = term if total is None else total + term
    if total is None:
        return None
    total.backward()
    return [normalize(t.grad) if t.grad is not None else ("N", "None", None) for t in leaves]


def is_kiln_error(e):
    return isinstance(e, kiln.Error)


class Outcome:
    """kind: agree, agree_raise, agree_binding (both refuse a type, kiln via the binding layer),
    or a difference: dtype, shape, values, grad, structure, refused (kiln.Error where torch
    works), binding (a non-kiln exception), accepted (kiln works where torch raises), infer (a
    graph's inferred dtype or shape is not its result's), harness (both raise the same
    exception: the case itself is wrong)."""

    def __init__(self, case, kind, detail=""):
        self.case, self.kind, self.detail = case, kind, detail

    @property
    def differs(self):
        return not self.kind.startswith("agree")

    def line(self):
        return f"[{self.kind}] {self.case.repro()}: {self.detail}"


def _cast_torch_f32(a):
    if torch is not None and isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16:
        return a.float().requires_grad_(a.requires_grad)
    return a


def run_case(case, oracle_f32=False):
    kl, tl = Lib(True), Lib(False)
    kerr = terr = None
    try:
        kout, kleaves = case.call(kl)
    except Exception as e:  # noqa: BLE001 - the kind of exception is what is compared
        kerr = e
    try:
        if oracle_f32:
            tout, tleaves = _call_f32(case, tl)
        else:
            tout, tleaves = case.call(tl)
    except Exception as e:  # noqa: BLE001
        terr = e
    if isinstance(kerr, InferMismatch):
        return Outcome(case, "infer", str(kerr))
    if kerr is not None:
        msg = f"{type(kerr).__name__}: {str(kerr).splitlines()[0][:160] if str(kerr) else ''}"
        if terr is not None and type(kerr) is type(terr) and str(kerr) == str(terr):
            # the same exception from both: the case's own code failed, not the libraries
            return Outcome(case, "harness", msg)
        if not is_kiln_error(kerr):
            if terr is not None and isinstance(terr, TypeError) and isinstance(kerr, TypeError):
                return Outcome(case, "agree_binding", msg)
            return Outcome(case, "binding", msg + (f" (torch: {type(terr).__name__})" if terr
                                                   else " (torch works)"))
        if terr is not None:
            return Outcome(case, "agree_raise", msg)
        return Outcome(case, "refused", msg)
    if terr is not None:
        return Outcome(case, "accepted", f"torch raises {type(terr).__name__}: "
                                         f"{str(terr).splitlines()[0][:160] if str(terr) else ''}")
    try:
        kn, tn = normalize(kout), normalize(tout)
    except Exception as e:  # noqa: BLE001
        return Outcome(case, "binding", f"reading the result: {type(e).__name__}: {e}")
    if oracle_f32:
        tn = _as_bf16(tn)
    r = compare(kn, tn, case.tol)
    if r:
        return Outcome(case, *r)
    if case.grad:
        kerr = terr = None
        try:
            kg = _backward(kl, kout, kleaves)
        except Exception as e:  # noqa: BLE001
            kerr = e
        try:
            tg = _backward(tl, tout, tleaves)
        except Exception as e:  # noqa: BLE001
            terr = e
        if kerr is not None or terr is not None:
            if kerr is not None and terr is not None:
                return Outcome(case, "agree_raise", "both backward passes raise")
            who, e = ("kiln", kerr) if kerr is not None else ("torch", terr)
            return Outcome(case, "grad", f"{who} backward raises {type(e).__name__}: "
                                         f"{str(e).splitlines()[0][:160]}")
        if (kg is None) != (tg is None):
            return Outcome(case, "grad", f"kiln grads {kg is not None}, torch {tg is not None}")
        if kg is not None:
            r = compare(("S", kg), ("S", tg), case.tol, "grad")
            if r:
                return Outcome(case, "grad", r[1])
    return Outcome(case, "agree")


def _call_f32(case, tl):
    """torch on float32 copies of the bf16 arguments (where torch 1.13 is wrong in bf16)."""
    orig = make_tensor

    def patched(lib, values, dtype, grad=False):
        if not lib.is_kiln and dtype == "bfloat16":
            values = values.astype(np.float32)
            dtype = "float32"
        return orig(lib, values, dtype, grad)
    globals()["make_tensor"] = patched
    try:
        return case.call(tl)
    finally:
        globals()["make_tensor"] = orig


def _as_bf16(n):
    if n[0] == "T" and n[1] == "float32":
        v = torch.from_numpy(n[3]).to(torch.bfloat16).float().numpy()
        return ("T", "bfloat16", n[2], v)
    if n[0] == "S":
        return ("S", [_as_bf16(x) for x in n[1]])
    return n


# ---- the documented differences -----------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _glob_re(pattern):
    # only * and ? are wildcards: case ids are full of [ and ] (shapes)
    return re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch)
                              for ch in pattern) + r"\Z", re.S)


def glob_match(pattern, case_id):
    return _glob_re(pattern).match(case_id) is not None


def glob_filter(ids, pattern):
    return [i for i in ids if glob_match(pattern, i)]


class DocRow:
    """A row of the table: keys (patterns over case ids, * the only wildcard), the kind of
    difference, and the text."""

    def __init__(self, keys, kind, call, torch_does, kiln_does, reason):
        self.keys, self.kind, self.call = keys, kind, call
        self.key = " ".join(keys)
        self.torch_does, self.kiln_does, self.reason = torch_does, kiln_does, reason

    def matches(self, case_id):
        return any(glob_match(k, case_id) for k in self.keys)


def load_documented(path=DOC):
    """The rows of the table in docs/torch_differences.md: | `key` | kind | call | torch |
    Kiln | reason |. kind is an Outcome kind, or torch-bf16-bug (compared against float32
    torch)."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            if not line.startswith("| `"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 6:
                raise AssertionError(f"{path}: a row needs 6 cells: {line!r}")
            keys = re.findall(r"`([^`]+)`", cells[0])
            rows.append(DocRow(keys, *cells[1:]))
    return rows


def match_pattern(patterns, case_id):
    for p in patterns:
        if glob_match(p, case_id):
            return p
    return None


class Tally:
    """Counts over the cases run: compared, agreements (both raising included), documented,
    known bugs (expected failures), silent differences."""

    def __init__(self):
        self.compared = self.agree = self.agree_raise = self.agree_binding = 0
        self.documented = self.known = self.silent = 0
        self.silent_lines, self.binding_lines, self.known_lines = [], [], []

    def add(self, o, documented=False, known=False):
        self.compared += 1
        if documented:
            self.documented += 1
        elif not o.differs:
            self.agree += 1
            self.agree_raise += o.kind == "agree_raise"
            self.agree_binding += o.kind == "agree_binding"
            if o.kind == "agree_binding":
                self.binding_lines.append(o.line())
        elif known:
            self.known += 1
            self.known_lines.append(o.line())
        else:
            self.silent += 1
            self.silent_lines.append(o.line())

    def merge(self, other):
        for k in ("compared", "agree", "agree_raise", "agree_binding", "documented", "known",
                  "silent"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.silent_lines += other.silent_lines
        self.binding_lines += other.binding_lines
        self.known_lines += other.known_lines

    def summary(self, title="torch differential"):
        return (f"{title}: {self.compared} calls compared, {self.agree} agreements "
                f"({self.agree_raise} both raise, {self.agree_binding} both refuse the type with "
                f"kiln via the binding layer), {self.documented} documented differences, "
                f"{self.known} known bugs, {self.silent} silent differences")


class Suite:
    """Runs one file's cases: groups for the pytest items, KNOWN_BUGS patterns as strict
    xfails, documented rows from the docs table."""

    def __init__(self, cases, known_bugs):
        self.missing = sorted({c.name for c in cases if not c.in_kiln()})
        cases = [c for c in cases if c.in_kiln()]
        ids = {}
        for c in cases:
            if c.id in ids:
                raise AssertionError(f"duplicate case id {c.id}")
            ids[c.id] = c
        self.cases, self.known = cases, dict(known_bugs)
        self.doc = load_documented()
        self.groups = {}
        for c in cases:
            self.groups.setdefault(c.group, []).append(c)
        self.tally = Tally()

    def doc_row(self, case):
        for r in self.doc:
            if r.matches(case.id):
                return r
        return None

    def check(self, case):
        """(outcome, documented row or None, known-bug pattern or None, error or None)."""
        rows = [r for r in self.doc if r.matches(case.id)]
        if case.mode == "autocast":  # no float32 oracle under autocast
            rows = [r for r in rows if r.kind != "torch-bf16-bug"]
        row = rows[0] if rows else None
        oracle = row is not None and row.kind == "torch-bf16-bug"
        o = run_case(case, oracle_f32=oracle)
        if o.differs and len(rows) > 1:  # several rows name it: the one of its kind
            row = next((r for r in rows if r.kind == o.kind), row)
        if row is not None and case.mode == "autocast" and o.kind != row.kind:
            row = None  # the rows are about the ops; autocast's casts may differ on their own
        known = match_pattern(self.known, case.id)
        err = None
        if row is not None and not oracle:
            # a row may name agreeing cases too (its key is a pattern); those that differ
            # must differ the documented way
            if o.differs and o.kind != row.kind:
                err = (f"documented as {row.kind} in docs/torch_differences.md ({row.key}) but "
                       f"now {o.line()}")
        elif row is not None and oracle and o.differs:
            err = f"against float32 torch (documented torch bf16 bug): {o.line()}"
        elif o.differs and not known:
            err = o.line()
        return o, row, known, err

    def run_group(self, group):
        errors = []
        for case in self.groups[group]:
            if match_pattern(self.known, case.id):
                continue  # run by the known-bug items
            o, row, known, err = self.check(case)
            self.tally.add(o, documented=row is not None and (o.differs or
                                                              row.kind == "torch-bf16-bug"))
            if err:
                errors.append(err)
        return errors

    def run_known(self, pattern):
        """The cases a KNOWN_BUGS pattern names; the differences among them."""
        matched = [c for c in self.cases if glob_match(pattern, c.id)]
        diffs = []
        for case in matched:
            o, row, _, err = self.check(case)
            documented = row is not None and not err and (o.differs or
                                                          row.kind == "torch-bf16-bug")
            self.tally.add(o, documented=documented, known=o.differs and not documented)
            if o.differs and not documented:
                diffs.append(o.line())
        return matched, diffs

    def run_all(self):
        """Everything, for the report script: a Tally."""
        t = Tally()
        for case in self.cases:
            o, row, known, _ = self.check(case)
            t.add(o, documented=row is not None and (o.differs or row.kind == "torch-bf16-bug"),
                  known=known is not None)
        return t


def install_tests(g, cases, known_bugs, title):
    """Defines a case file's pytest items in its globals g: one item per group, one strict xfail
    per KNOWN_BUGS pattern, a check that every pattern names a case, and the counts (printed
    with -s; last in the file so they cover the items before)."""
    import pytest
    suite = Suite(cases, known_bugs)
    g["SUITE"] = suite
    # torch's deprecation and beta notices (F.sigmoid, scatter_reduce, ...) are not findings
    g["pytestmark"] = pytest.mark.filterwarnings("ignore::UserWarning")

    @pytest.mark.parametrize("group", sorted(suite.groups))
    def test_matches_torch(group):
        errors = suite.run_group(group)
        assert not errors, f"{len(errors)} differences:\n" + "\n".join(errors[:25])

    @pytest.mark.parametrize("pattern", [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=r))
        for p, r in known_bugs.items()])
    def test_known_bug(pattern):
        matched, diffs = suite.run_known(pattern)
        assert not diffs, "\n".join(diffs[:10])

    def test_known_bugs_name_cases():
        ids = [c.id for c in suite.cases]
        stale = [p for p in known_bugs if not glob_filter(ids, p)]
        assert not stale, f"KNOWN_BUGS patterns naming no case: {stale}"

    def test_zz_counts():
        print("\n" + suite.tally.summary(title))
        assert suite.tally.compared > 0

    for f in (test_matches_torch, test_known_bug, test_known_bugs_name_cases, test_zz_counts):
        g[f.__name__] = f
    return suite
