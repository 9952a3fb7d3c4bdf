#include "core/spec/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace treespec {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature) || temperature > 100.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be in [0, 100], got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  return absl::OkStatus();
}

float SparseDist::ProbOf(int32_t token) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == token) return probs[i];
  }
  return 0.0f;
}

int32_t Argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

void ProcessLogits(const float* logits, int64_t vocab, const SamplingParams& params,
                   float* probs) {
  for (int64_t i = 0; i < vocab; ++i) probs[i] = 0.0f;
  const double inv_t = 1.0 / params.temperature;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = (params.top_k > 0 && params.top_k < vocab) ? params.top_k : vocab;
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (keep < vocab) {
    // top-p only ever narrows the top-k set: order just those.
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), higher);
  } else if (params.top_p < 1.0f) {
    std::sort(order.begin(), order.end(), higher);
  }
  const double mx = logits[Argmax(logits, vocab)] * inv_t;
  std::vector<double> e(keep);
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    e[i] = std::exp(static_cast<double>(logits[order[i]]) * inv_t - mx);
    sum += e[i];
  }
  if (params.top_p < 1.0f) {
    double cum = 0.0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      cum += e[i] / sum;
      if (cum >= params.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = 0.0;
    for (int64_t i = 0; i < keep; ++i) sum += e[i];
  }
  for (int64_t i = 0; i < keep; ++i) probs[order[i]] = static_cast<float>(e[i] / sum);
}

void ProcessLogits(const float* logits, int64_t vocab, const SamplingParams& params,
                   std::vector<float>* probs) {
  probs->resize(vocab);
  ProcessLogits(logits, vocab, params, probs->data());
}

int32_t SampleDense(const std::vector<float>& probs, double u) {
  return SampleDense(probs.data(), static_cast<int64_t>(probs.size()), u);
}

int32_t SampleDense(const float* probs, int64_t n, double u) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += probs[i];
  double target = u * total, cum = 0.0;
  int32_t last = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (probs[i] <= 0.0f) continue;
    cum += probs[i];
    last = static_cast<int32_t>(i);
    if (target < cum) return last;
  }
  return last;
}

int32_t SampleSparse(const SparseDist& dist, double u) {
  double total = 0.0;
  for (float p : dist.probs) total += p;
  double target = u * total, cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < dist.probs.size(); ++i) {
    if (dist.probs[i] <= 0.0f) continue;
    cum += dist.probs[i];
    last = dist.tokens[i];
    if (target < cum) return last;
  }
  return last;
}

namespace {

// The k largest logits' indices, by logit descending, then index ascending.
std::vector<int32_t> TopKOrder(const float* logits, int64_t vocab, int k) {
  std::vector<int32_t> order;
  if (k > 64) {  // one insertion pass would cost up to k moves per logit
    order.resize(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    order.resize(k);
    return order;
  }
  // One pass keeping the k best in order: a drafter asks for a few children
  // per node out of the whole vocabulary, so almost every logit fails the
  // comparison with the k-th best and costs one compare (the partial sort
  // above was 15% of the CPU demo drafter's time per node).
  order.resize(k);
  std::vector<float> best(k);
  int n = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const float x = logits[v];
    if (n == k) {
      if (!(x > best[k - 1])) continue;  // ties keep the lower index
    } else {
      ++n;
    }
    int i = n - 1;
    for (; i > 0 && best[i - 1] < x; --i) {
      best[i] = best[i - 1];
      order[i] = order[i - 1];
    }
    best[i] = x;
    order[i] = static_cast<int32_t>(v);
  }
  return order;
}

}  // namespace

SparseDist TopKDist(const float* logits, int64_t vocab, int k, float temperature) {
  k = static_cast<int>(std::min<int64_t>(std::max(k, 1), vocab));
  const std::vector<int32_t> order = TopKOrder(logits, vocab, k);
  const double inv_t = temperature > 0.0f ? 1.0 / temperature : 1.0;
  const double mx = logits[order[0]] * inv_t;
  SparseDist d;
  double sum = 0.0;
  std::vector<double> e(k);
  for (int i = 0; i < k; ++i) {
    e[i] = std::exp(static_cast<double>(logits[order[i]]) * inv_t - mx);
    sum += e[i];
  }
  for (int i = 0; i < k; ++i) {
    d.tokens.push_back(order[i]);
    d.probs.push_back(static_cast<float>(e[i] / sum));
  }
  return d;
}

}  // namespace treespec
