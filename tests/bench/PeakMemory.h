#pragma once

#include <fstream>
#include <string>

/// The process's peak resident memory (VmHWM), in MiB; 0 where /proc does not say.
inline double peakMiB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return 0;
}
