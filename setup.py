"""Builds kiln._C with the project's CMake (only the extension and libkiln, Release, native
CPU) and installs it with libkiln.so.0 beside it in the kiln package (see pyproject.toml)."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # The tree `make build` configured is reused (only the extension is built there);
        # otherwise a Release build of the library and the extension goes to build/pip.
        build = os.path.join(ROOT, "build", "release")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            build = os.path.join(ROOT, "build", "pip")
            cfg = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                   "-DKILN_BUILD_EXAMPLES=OFF", "-DKILN_BUILD_BENCH=OFF",
                   f"-DPython3_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                cfg += ["-G", "Ninja"]
            if shutil.which("ccache"):
                cfg += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
            subprocess.check_call(cfg)
        subprocess.check_call(["cmake", "--build", build, "--target", "kiln_python", "-j",
                               str(os.cpu_count() or 2)])
        out = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(out, exist_ok=True)
        for f in glob.glob(os.path.join(build, "python", "kiln", "_C*.so")):
            shutil.copy2(f, os.path.join(out, os.path.basename(self.get_ext_fullpath(ext.name))))
        shutil.copy2(os.path.join(build, "kiln", "libkiln.so.0"), os.path.join(out, "libkiln.so.0"))
        # kiln.onnx.export links libkiln_onnx when the build has it.
        onnx_lib = os.path.join(build, "kiln", "onnx", "libkiln_onnx.so.0")
        if os.path.exists(onnx_lib):
            shutil.copy2(onnx_lib, os.path.join(out, "libkiln_onnx.so.0"))


setup(
    # kiln and its subpackages (kiln.nn, kiln.nn.modules, kiln.optim, kiln.utils.data, ...).
    packages=["kiln"] + ["kiln." + p for p in find_packages(os.path.join(ROOT, "python", "kiln"))],
    package_dir={"kiln": "python/kiln"},
    package_data={"kiln": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("kiln._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
