#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

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

bool CpuHasAvx2Fma() {
  static const bool have = CpuIsaCap() >= CpuIsa::kAvx2 && __builtin_cpu_supports("avx2") &&
                           __builtin_cpu_supports("fma");
  return have;
}

bool CpuHasAvx2FmaF16c() {
  // F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know
  // "f16c").
  static const bool have = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return CpuHasAvx2Fma() && __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
  }();
  return have;
}

bool CpuHasAvx512() {
  static const bool have = CpuIsaAllowsAvx512() && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma");
  return have;
}

}  // namespace treespec::cpu
