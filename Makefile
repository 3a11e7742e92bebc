# Kiln's front door: `make demo` and `make test` do all set-up on a fresh Debian 12 machine
# (as root: missing packages are installed with apt-get), then build and run.
SHELL := /bin/bash
BUILD_DEPS := cmake ninja-build g++ make libdnnl-dev libopenblas-dev libgtest-dev libgmock-dev \
              libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata \
              libbenchmark-dev zlib1g-dev pkg-config liblapacke-dev libopenmpi-dev openmpi-bin
# The Python package (python/): pybind11 and Debian's python3 with NumPy and pytest.
PYTHON_DEPS := pybind11-dev python3-dev python3-numpy python3-pytest
DATA_DEPS := dataset-fashion-mnist fortunes
BENCH_DEPS := python3-torch libtorch-dev
# The ONNX model tests export their models with PyTorch 1.13 and check them with onnx.checker.
TEST_DEPS := python3-torch python3-onnx
# Node.js and npm for onnxruntime-node, from Debian only where no npm is there: a NodeSource
# nodejs (which carries its own npm) conflicts with Debian's npm package.
NODE_DEPS := nodejs npm
FORMAT_DEPS := clang-format
# libFuzzer targets (fuzz/): clang 16 and its fuzzer runtime.
FUZZ_DEPS := clang-16 libclang-rt-16-dev
FUZZ_SECONDS ?= 20
JOBS ?= $(shell nproc)

# onnxruntime-node from npm, the second engine the ONNX export tests and bench/run use; its
# install script downloads extras (GPU providers), so scripts are skipped: the CPU library is in
# the package. Installed into build/node (ignored by git), once.
define ORT_NODE
	@command -v npm >/dev/null || $(MAKE) --no-print-directory node-deps
	@test -d build/node/node_modules/onnxruntime-node || \
	  (mkdir -p build/node && cd build/node && npm install --no-save --ignore-scripts --silent onnxruntime-node)
endef

.PHONY: fuzz node-deps all deps bench-deps build demo test test-asan asan test-tsan tsan bench format \
        format-check clean

all: build

# Installs only what is missing, so repeated runs cost a dpkg query each.
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

node-deps:
	$(call apt_install,$(NODE_DEPS))

deps:
	$(call apt_install,$(BUILD_DEPS) $(PYTHON_DEPS) $(DATA_DEPS))

bench-deps: deps
	$(call apt_install,$(BENCH_DEPS))

build: deps
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS)

# The CNN on Fashion-MNIST, one epoch eagerly and one under jit, then the table; the model
# graph goes to build/release/cnn.mmd (Mermaid) and cnn.dot (Graphviz).
demo: build
	./build/release/examples/cnn_fashion_mnist --mode both --epochs 1 \
	  --mermaid build/release/cnn.mmd --dot build/release/cnn.dot

test: build
	$(call apt_install,$(TEST_DEPS))
	$(ORT_NODE)
	ctest --preset release -j $(JOBS)

asan: deps
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS)

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer (the slow label is skipped).
# The registry-driven cases (Registry/..., Samples/...) are one ctest test per binary
# (tests/CMakeLists.txt), so LeakSanitizer checks them all at that process's exit.
# ModeAgreement (every sample in 5 modes, a forked child each) took 112 s of this run's 238 on 2
# cores, for CI's 30-minute budget; it runs in `make test`, and the same graph, jit and
# dynamic-dim paths run here through the registry cases and the jit tests.
# The sanitizer presets compile at -Og: the ASan build took 377 s instead of 496 s at -O1 and
# its tests ran as fast (164 s vs 171 s), UBSan and ASan checking the same code.
test-asan: asan
	ctest --preset asan -j $(JOBS) -LE slow -E '^ModeAgreement\.'

# The tests that run threads, under ThreadSanitizer: one Session and one jitted function called
# from 8 threads (test_threads_shared), and the ops whose kernels split work over the intra-op
# pool (parallel_for on OpenMP, 4 threads; it tells TSan about each region's fork and join, as
# libgomp is not instrumented). oneDNN and OpenBLAS are not instrumented either and sync their
# own threads out of TSan's sight: ignore_noninstrumented_modules keeps their memcpy/memset
# (TSan's interceptors) out of the reports; Kiln's own code is all checked. Only the library and
# these binaries are built. A report fails the run (TSan's exit code 66).
TSAN_TESTS := test_threads_shared test_ops_nn test_ops_linalg test_ops_attention test_unit_errors \
              test_ops_recurrent
TSAN_ENV := TSAN_OPTIONS="ignore_noninstrumented_modules=1 second_deadlock_stack=1 $$TSAN_OPTIONS" \
            OMP_NUM_THREADS=4
tsan: deps
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan -j $(JOBS) --target $(TSAN_TESTS)

test-tsan: tsan
	@set -e; for t in $(TSAN_TESTS); do \
	  echo "tsan: $$t"; \
	  $(TSAN_ENV) ./build/tsan/tests/$$t --gtest_brief=1; \
	done

# The loaders' libFuzzer targets, FUZZ_SECONDS each on the seed corpus (CI: a short run), then
# every model of the ONNX node suite once through the instrumented importer (and a run on
# zeros). This is where libkiln_onnx runs under ASan+UBSan: the asan preset leaves it out
# (KILN_ONNX=OFF) rather than compile it twice with sanitizers.
fuzz: build
	$(call apt_install,$(FUZZ_DEPS))
	fuzz/build.sh
	fuzz/run.sh $(FUZZ_SECONDS)
	@set -o pipefail; build/fuzz/fuzz_onnx_import -rss_limit_mb=2560 -malloc_limit_mb=2048 \
	  /usr/share/libonnx-testdata/data/node/*/model.onnx 2>&1 | tail -1

bench: bench-deps build
	$(call apt_install,nodejs npm python3-onnx)
	$(ORT_NODE)
	bench/run

format:
	$(call apt_install,$(FORMAT_DEPS))
	git ls-files '*.h' '*.cpp' | xargs clang-format -i

# Fails (and lists the places) when a C++ file differs from what clang-format makes of it.
format-check:
	$(call apt_install,$(FORMAT_DEPS))
	git ls-files '*.h' '*.cpp' | xargs clang-format --dry-run --Werror

clean:
	rm -rf build
