#include "core/tokenizer/bpe.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/tokenizer/utf8.h"
#include "core/util/json_fields.h"

namespace treespec {
namespace {

using nlohmann::json;

// Vocabulary ids above this are rejected (a typo or a hostile file must not
// make us allocate gigabytes).
constexpr int64_t kMaxTokenId = 1 << 24;

absl::Status FieldError(const std::string& file, const std::string& field,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": field '", field, "' ", what));
}

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& model,
                                                             const std::string& file) {
  auto m = std::make_unique<BpeModel>();
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    return FieldError(file, "model.vocab", "must be an object of token -> id");
  }
  int64_t max_id = -1;
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= kMaxTokenId) {
      return FieldError(file, absl::StrCat("model.vocab[\"", it.key(), "\"]"),
                        absl::StrCat("must be an id in [0, ", kMaxTokenId, "), got ",
                                     JsonExcerpt(it.value())));
    }
    const int64_t id = it.value().get<int64_t>();
    m->vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  const int64_t entries = static_cast<int64_t>(vocab_it->size());
  if (max_id >= entries + BpeModel::kMaxUnusedIds) {
    return FieldError(file, "model.vocab",
                      absl::StrCat("has ", entries, " entries but ids up to ", max_id,
                                   ": ids must be dense (at most ", BpeModel::kMaxUnusedIds,
                                   " unused below the largest)"));
  }
  m->id_to_token_.resize(max_id + 1);
  for (const auto& [token, id] : m->vocab_) m->id_to_token_[id] = token;

  auto flag = [&](const char* key, bool* out) -> absl::Status {
    auto it = model.find(key);
    if (it == model.end() || it->is_null()) return absl::OkStatus();
    if (!it->is_boolean()) return FieldError(file, absl::StrCat("model.", key), "must be a boolean");
    *out = it->get<bool>();
    return absl::OkStatus();
  };
  if (auto s = flag("byte_fallback", &m->byte_fallback_); !s.ok()) return s;
  if (auto s = flag("fuse_unk", &m->fuse_unk_); !s.ok()) return s;
  if (auto s = flag("ignore_merges", &m->ignore_merges_); !s.ok()) return s;
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return absl::UnimplementedError(
          absl::StrCat(file, ": field 'model.", key, "' = ", JsonExcerpt(*it), " is not supported"));
    }
  }
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return absl::UnimplementedError(
        absl::StrCat(file, ": field 'model.dropout' = ", JsonExcerpt(*dropout), " is not supported"));
  }
  auto unk = model.find("unk_token");
  if (unk != model.end() && !unk->is_null()) {
    if (!unk->is_string()) return FieldError(file, "model.unk_token", "must be a string");
    auto v = m->vocab_.find(unk->get<std::string>());
    if (v == m->vocab_.end()) {
      return FieldError(file, "model.unk_token",
                        absl::StrCat("names '", unk->get<std::string>(),
                                     "', which is not in model.vocab"));
    }
    m->unk_id_ = v->second;
  }
  m->byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) m->byte_ids_[b] = m->TokenToId(absl::StrFormat("<0x%02X>", b));

  auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) {
    return FieldError(file, "model.merges", "must be a list");
  }
  int32_t rank = 0;
  for (const json& merge : *merges_it) {
    const std::string field = absl::StrCat("model.merges[", rank, "]");
    std::string left, right;
    if (merge.is_string()) {
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return FieldError(file, field, absl::StrCat("must be \"left right\", got ", JsonExcerpt(merge)));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return FieldError(file, field, absl::StrCat("must be \"left right\" or [left, right], got ",
                                                  JsonExcerpt(merge)));
    }
    const int32_t a = m->TokenToId(left);
    const int32_t b = m->TokenToId(right);
    const int32_t ab = m->TokenToId(left + right);
    if (a < 0 || b < 0 || ab < 0) {
      return FieldError(file, field,
                        absl::StrCat("merges '", left, "' + '", right,
                                     "', but ", a < 0 ? left : b < 0 ? right : left + right,
                                     " is not in model.vocab"));
    }
    m->merges_[PairKey(a, b)] = Merge{rank, ab};
    ++rank;
  }
  return m;
}

int32_t BpeModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

// Mirrors tokenizers' BPE::merge_word + Word::merge_all (tokenizers 0.20): the
// initial symbols are the word's characters (or their <0xNN> bytes, or unk),
// then a min-heap keyed by (rank, position) repeatedly applies the best merge.
// Heap entries are validated lazily by the merged id, exactly as upstream, so
// ties and stale entries resolve the same way and the ids match bit for bit.
absl::Status BpeModel::EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    const int32_t id = TokenToId(word);
    if (id >= 0) {
      ids->push_back(id);
      return absl::OkStatus();
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id) {
    const int32_t n = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, n - 1, -1, false});
    if (n > 0) symbols[n - 1].next = n;
  };
  bool pending_unk = false;
  size_t i = 0;
  while (i < word.size()) {
    const size_t len = std::min(Utf8CharLength(static_cast<uint8_t>(word[i])), word.size() - i);
    const absl::string_view ch = word.substr(i, len);
    i += len;
    const int32_t id = TokenToId(ch);
    if (id >= 0) {
      if (pending_unk) add(unk_id_);
      pending_unk = false;
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_ < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "character '", ch, "' is not in the vocabulary and the tokenizer has no unk_token"));
    }
    if (pending_unk && !fuse_unk_) add(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) add(unk_id_);

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  for (int32_t p = 0; p + 1 < static_cast<int32_t>(symbols.size()); ++p) {
    if (const Merge* m = FindMerge(symbols[p].id, symbols[p + 1].id)) {
      queue.push({m->rank, p, m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.removed || cur.next < 0) continue;
    Symbol& right = symbols[cur.next];
    const Merge* m = FindMerge(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    cur.id = top.new_id;
    right.removed = true;
    cur.next = right.next;
    if (cur.next >= 0) symbols[cur.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const Merge* pm = FindMerge(symbols[cur.prev].id, cur.id)) {
        queue.push({pm->rank, cur.prev, pm->new_id});
      }
    }
    if (cur.next >= 0) {
      if (const Merge* nm = FindMerge(cur.id, symbols[cur.next].id)) {
        queue.push({nm->rank, top.pos, nm->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (!s.removed) ids->push_back(s.id);
  }
  return absl::OkStatus();
}

}  // namespace treespec
