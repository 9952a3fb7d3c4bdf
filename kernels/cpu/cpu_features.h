// The instruction sets the CPU kernels may use. Each kernel picks its path
// from the CPU's features once per process; TREESPEC_CPU_ISA caps them, so
// that a CPU with AVX-512 can run (and CI can test, and benchmarks can time)
// the paths of CPUs without it:
//   native (or unset)  what the CPU has
//   avx2               no AVX-512: the paths of CPUs with AVX2, FMA and F16C
//   portable           no AVX2 either: the scalar loops
// Any other value is reported once on stderr and taken as native.
#pragma once

namespace treespec::cpu {

enum class CpuIsa { kPortable = 0, kAvx2 = 1, kNative = 2 };

// The cap from TREESPEC_CPU_ISA (read once, thread-safe).
CpuIsa CpuIsaCap();

// Whether kernels may use AVX-512 instructions (the CPU's own features
// checked apart; the predicates below check both).
inline bool CpuIsaAllowsAvx512() { return CpuIsaCap() >= CpuIsa::kNative; }

// The feature sets the kernels dispatch on, each within the cap (read once):
// AVX2 and FMA; AVX2, FMA and F16C; AVX-512 F, BW, VL, DQ and FMA (paths
// needing more, VNNI or BF16, ask for those besides).
bool CpuHasAvx2Fma();
bool CpuHasAvx2FmaF16c();
bool CpuHasAvx512();

}  // namespace treespec::cpu
