"""pip install ./python — the `sluice` Python module, built by the repository's CMake.

build_ext configures the repository root (the folder above this one) in a build folder of
its own, builds the target sluice_python (the extension linked to the static libsluice,
built with -fPIC; no CUDA, no tests) and copies the extension into the package. So it needs
what the C build needs (cmake, a C compiler, the -dev packages of scripts/deps.sh) and
Python's headers (python3-dev), and nothing from the network:

    pip install --no-build-isolation ./python     # offline: uses the installed setuptools
    pip install ./python                          # the same here (no pyproject.toml: no isolation)

Environment: SLUICE_SOURCE_DIR (the repository, when this folder was copied elsewhere),
SLUICE_CMAKE_ARGS (more -D options, e.g. -DSLUICE_CUDA=ON), CMAKE (the cmake to run).
Runtime dependency: numpy; torch is optional (sluice.torch).
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("SLUICE_SOURCE_DIR") or os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")) or not os.path.isdir(os.path.join(ROOT, "core")):
            raise RuntimeError(f"sluice: the C sources are not at {ROOT} (this setup.py builds them with CMake): "
                               "install from a checkout (pip install ./python), or set SLUICE_SOURCE_DIR")
        cmake = os.environ.get("CMAKE", "cmake")
        build = os.path.join(os.path.abspath(self.build_temp), "cmake")
        cfg = [cmake, "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DSLUICE_TESTS=OFF",
               "-DSLUICE_PYTHON=ON", "-DSLUICE_CUDA=OFF", f"-DPython3_EXECUTABLE={sys.executable}"]
        cfg += shlex.split(os.environ.get("SLUICE_CMAKE_ARGS", ""))
        subprocess.check_call(cfg)
        jobs = str(self.parallel or os.cpu_count() or 1)
        subprocess.check_call([cmake, "--build", build, "--target", "sluice_python", "-j", jobs])
        built = glob.glob(os.path.join(build, "python", "sluice", "_sluice*.so"))
        if len(built) != 1:
            raise RuntimeError(f"sluice: expected one _sluice*.so in {build}/python/sluice, found {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    name="sluice",
    version="0.1.0",
    description="Sluice input pipelines (tf.data-style, in C) from Python: numpy arrays, DLPack, torch",
    packages=["sluice"],
    ext_modules=[Extension("sluice._sluice", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.8",
    install_requires=["numpy>=1.22"],
    extras_require={"torch": ["torch>=1.10"]},
    zip_safe=False,
)
