# Finds LibTorch in the PyTorch installation that HOOKSCOPE_PYTHON imports, and checks that
# the build links that one and not another LibTorch on the system (Debian's libtorch-dev
# puts libtorch.so on the default library path, where find_library would otherwise look first).
# Sets HOOKSCOPE_TORCH_VERSION and HOOKSCOPE_OPERATOR_LIBRARIES (torchvision's operators, when
# a torchvision is installed beside that PyTorch).
set(_hs_prefix "")
if(EXISTS "${HOOKSCOPE_PYTHON}" OR NOT Torch_DIR)
  execute_process(
    COMMAND "${HOOKSCOPE_PYTHON}" -c
      "import os, torch; print(os.path.dirname(torch.__file__) + ';' + torch.__version__)"
    OUTPUT_VARIABLE _hs_torch RESULT_VARIABLE _hs_rc ERROR_VARIABLE _hs_err
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _hs_rc EQUAL 0)
    string(REGEX REPLACE ".*\n([^\n]+)\n?$" "\\1" _hs_err "${_hs_err}")
    message(FATAL_ERROR
      "HookScope builds on the LibTorch inside a PyTorch 2.x installation, and "
      "'${HOOKSCOPE_PYTHON}' could not import torch (${_hs_err}).\n"
      "Run scripts/setup.sh, which makes .venv/ with torch==2.13.0, or point the build at "
      "your own: -DHOOKSCOPE_PYTHON=/path/to/venv/bin/python (HOOKSCOPE_PYTHON=... for the scripts).")
  endif()
  list(GET _hs_torch 0 _hs_prefix)
  list(GET _hs_torch 1 _hs_version)
  if(_hs_version VERSION_LESS 2.0)
    message(FATAL_ERROR "'${HOOKSCOPE_PYTHON}' has PyTorch ${_hs_version}; HookScope needs 2.0 or newer.")
  endif()
  if(Torch_DIR AND NOT Torch_DIR MATCHES "^${_hs_prefix}/")
    message(FATAL_ERROR "This build folder was configured with the LibTorch in ${Torch_DIR}, "
      "but '${HOOKSCOPE_PYTHON}' has PyTorch ${_hs_version} in ${_hs_prefix}. Delete the build "
      "folder (${CMAKE_BINARY_DIR}) and configure again.")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${_hs_prefix}")
endif()

find_package(Torch REQUIRED)
get_filename_component(_hs_torch_lib "${TORCH_LIBRARY}" DIRECTORY)
get_filename_component(_hs_torch_root "${Torch_DIR}/../../.." ABSOLUTE)
if(_hs_prefix AND NOT _hs_torch_lib STREQUAL "${_hs_torch_root}/lib")
  message(FATAL_ERROR "LibTorch's config is in ${Torch_DIR} but libtorch.so was found at "
    "${TORCH_LIBRARY}: two LibTorch installations are mixed. Configure in a new build folder.")
endif()
if(Torch_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "LibTorch ${Torch_VERSION} in ${Torch_DIR} is too old: HookScope needs 2.0 or newer.")
endif()
message(STATUS "HookScope builds on LibTorch ${Torch_VERSION} from ${_hs_torch_root}")

# torchvision's operators (torchvision::nms, roi_align, ...) when a torchvision sits beside
# this torch; found without importing it, since a mismatched one fails to import.
set(HOOKSCOPE_OPERATOR_LIBRARIES "")
get_filename_component(_hs_site "${_hs_torch_root}/.." ABSOLUTE)
file(GLOB _hs_vision "${_hs_site}/torchvision/_C*.so")
if(_hs_vision)
  list(GET _hs_vision 0 HOOKSCOPE_OPERATOR_LIBRARIES)
  message(STATUS "torchvision's operator library, loaded when it can be: ${HOOKSCOPE_OPERATOR_LIBRARIES}")
endif()

# Installed programs find this LibTorch without LD_LIBRARY_PATH.
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
