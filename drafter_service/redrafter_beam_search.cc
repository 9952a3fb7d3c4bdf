#include "drafter_service/redrafter_beam_search.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

struct Candidate {
  std::vector<int32_t> tokens;
  std::vector<float> log_probs;
  double score = 0.0;
  std::vector<float> s;  // [H] the RNN state that scores the next token
};

struct Extension {
  double score;
  int32_t parent;
  int32_t token;
  float log_prob;
};

bool Better(const Extension& a, const Extension& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.parent != b.parent) return a.parent < b.parent;
  return a.token < b.token;
}

// log-softmax of one logits row; its `k` best entries (ties: lower id).
std::vector<std::pair<int32_t, float>> TopLogProbs(const float* row, int64_t V, int32_t k) {
  const float mx = *std::max_element(row, row + V);
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - mx));
  const float log_z = mx + static_cast<float>(std::log(sum));
  std::vector<int32_t> ids(V);
  for (int64_t v = 0; v < V; ++v) ids[v] = static_cast<int32_t>(v);
  auto cmp = [row](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), cmp);
  std::vector<std::pair<int32_t, float>> out;
  for (int32_t i = 0; i < k; ++i) out.push_back({ids[i], row[ids[i]] - log_z});
  return out;
}

// Keeps the `width` best extensions of `live` (scored by `logits`, one row
// per candidate) and returns them with their parents' states (not yet
// stepped).
std::vector<Candidate> Extend(const std::vector<Candidate>& live, const float* logits, int64_t V,
                              int32_t width) {
  std::vector<Extension> ext;
  for (size_t b = 0; b < live.size(); ++b) {
    for (const auto& [token, lp] : TopLogProbs(logits + b * V, V, width)) {
      ext.push_back({live[b].score + lp, static_cast<int32_t>(b), token, lp});
    }
  }
  const size_t keep = std::min<size_t>(width, ext.size());
  std::partial_sort(ext.begin(), ext.begin() + keep, ext.end(), Better);
  std::vector<Candidate> next;
  for (size_t i = 0; i < keep; ++i) {
    Candidate c = live[ext[i].parent];
    c.tokens.push_back(ext[i].token);
    c.log_probs.push_back(ext[i].log_prob);
    c.score = ext[i].score;
    next.push_back(std::move(c));
  }
  return next;
}

}  // namespace

absl::StatusOr<std::vector<Beams>> RedrafterBeamSearch(RedrafterHead* head,
                                                       const std::vector<BeamRequest>& requests) {
  const int64_t H = head->info().hidden_size, V = head->info().vocab_size;
  const size_t R = requests.size();
  std::vector<std::vector<Candidate>> live(R);
  std::vector<int32_t> roots;
  int32_t max_length = 0;
  for (const BeamRequest& q : requests) {
    if (q.width < 1 || q.length < 1 || q.h == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("beam request: width ", q.width, ", length ",
                                                     q.length, " (both must be >= 1)"));
    }
    roots.push_back(q.root);
    max_length = std::max(max_length, q.length);
  }
  std::vector<float> s;
  TS_RETURN_IF_ERROR(head->InitState(roots, &s));
  for (size_t r = 0; r < R; ++r) {
    live[r].push_back({{}, {}, 0.0, std::vector<float>(s.begin() + r * H, s.begin() + (r + 1) * H)});
  }
  for (int32_t j = 0; j < max_length; ++j) {
    // One Logits call over every live candidate of every unfinished request.
    std::vector<float> states, ctx;
    for (size_t r = 0; r < R; ++r) {
      if (j >= requests[r].length) continue;
      for (const Candidate& c : live[r]) {
        states.insert(states.end(), c.s.begin(), c.s.end());
        ctx.insert(ctx.end(), requests[r].h, requests[r].h + H);
      }
    }
    std::vector<float> logits;
    TS_RETURN_IF_ERROR(head->Logits(states, ctx, &logits));
    size_t row = 0;
    std::vector<float> step_s;
    std::vector<int32_t> step_tokens;
    for (size_t r = 0; r < R; ++r) {
      if (j >= requests[r].length) continue;
      const size_t n = live[r].size();
      const int32_t width = static_cast<int32_t>(std::min<int64_t>(requests[r].width, V));
      live[r] = Extend(live[r], logits.data() + row * V, V, width);
      row += n;
      if (j + 1 >= requests[r].length) continue;
      for (const Candidate& c : live[r]) {
        step_s.insert(step_s.end(), c.s.begin(), c.s.end());
        step_tokens.push_back(c.tokens.back());
      }
    }
    if (step_tokens.empty()) continue;
    // One RNN step for every surviving candidate: s_{j+2} = f(s_{j+1}, y_{j+1}).
    std::vector<float> next;
    TS_RETURN_IF_ERROR(head->Step(step_s, step_tokens, &next));
    size_t k = 0;
    for (size_t r = 0; r < R; ++r) {
      if (j + 1 >= requests[r].length) continue;
      for (Candidate& c : live[r]) {
        c.s.assign(next.begin() + k * H, next.begin() + (k + 1) * H);
        ++k;
      }
    }
  }
  std::vector<Beams> out(R);
  for (size_t r = 0; r < R; ++r) {
    out[r].width = static_cast<int32_t>(live[r].size());
    out[r].length = requests[r].length;
    for (const Candidate& c : live[r]) {
      out[r].tokens.insert(out[r].tokens.end(), c.tokens.begin(), c.tokens.end());
      out[r].log_probs.insert(out[r].log_probs.end(), c.log_probs.begin(), c.log_probs.end());
    }
  }
  return out;
}

}  // namespace treespec
