# Sourced by the scripts: the project root, the Python whose PyTorch HookScope builds on,
# and a CMake that reads LibTorch's config files.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# HOOKSCOPE_PYTHON: your own Python with PyTorch 2.x; by default the venv setup.sh makes.
python=${HOOKSCOPE_PYTHON:-$root/.venv/bin/python}
# A pip-installed CMake 4.x may come first on PATH; it rejects config files that ask for
# CMake < 3.5, so Debian's is preferred and the policy floor is set for any other.
cmake=/usr/bin/cmake
[ -x "$cmake" ] || cmake=cmake
export CMAKE_POLICY_VERSION_MINIMUM=3.5
cmake_launcher=()
command -v ccache >/dev/null && cmake_launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
true
