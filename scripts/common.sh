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
# The fixtures a sanitizer stage's tests read: made in folder $1 (by the Python whose PyTorch the
# engine links) when missing or older than the scripts that make them; prints the folder to use.
# HOOKSCOPE_MADE_FIXTURES names a folder ctest has just made (scripts/test.sh): that one, as it is,
# rather than making the same files twice more.
stage_fixtures() {
  if [ -n "${HOOKSCOPE_MADE_FIXTURES:-}" ]; then
    echo "$HOOKSCOPE_MADE_FIXTURES"
    return
  fi
  if [ ! -f "$1/.made" ] || [ -n "$(find "$root/tests/fixtures" -name '*.py' -newer "$1/.made")" ]; then
    "$python" "$root/tests/fixtures/make_fixtures.py" "$1" >/dev/null || return 1
    touch "$1/.made"
  fi
  echo "$1"
}
true
