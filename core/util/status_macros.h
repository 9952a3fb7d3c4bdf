// Status helpers used throughout treespec.
//
// TS_RETURN_IF_ERROR(expr)      returns the status of `expr` when it is not OK.
// TS_ASSIGN_OR_RETURN(lhs, expr) unwraps a StatusOr or returns its error.
// TS_CHECK(cond) aborts on a programmer invariant; never use it on request data.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TS_CONCAT_INNER_(a, b) a##b
#define TS_CONCAT_(a, b) TS_CONCAT_INNER_(a, b)

#define TS_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::absl::Status ts_status_ = (expr);               \
    if (!ts_status_.ok()) return ts_status_;          \
  } while (0)

#define TS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#define TS_ASSIGN_OR_RETURN(lhs, expr) \
  TS_ASSIGN_OR_RETURN_IMPL_(TS_CONCAT_(ts_statusor_, __LINE__), lhs, expr)

#define TS_CHECK(cond)                                                        \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                    \
      std::abort();                                                           \
    }                                                                         \
  } while (0)
