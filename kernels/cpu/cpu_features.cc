#include "kernels/cpu/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace treespec::cpu {

CpuIsa CpuIsaCap() {
  static const CpuIsa cap = [] {
    const char* v = std::getenv("TREESPEC_CPU_ISA");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "native") == 0) return CpuIsa::kNative;
    if (std::strcmp(v, "avx2") == 0) return CpuIsa::kAvx2;
    if (std::strcmp(v, "portable") == 0) return CpuIsa::kPortable;
    std::fprintf(stderr,
                 "treespec: TREESPEC_CPU_ISA: '%s' is not native, avx2 or portable; using native\n",
                 v);
    return CpuIsa::kNative;
  }();
  return cap;
}

}  // namespace treespec::cpu
