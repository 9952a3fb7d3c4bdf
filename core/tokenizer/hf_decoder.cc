#include "core/tokenizer/hf_decoder.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/pretokenizer.h"
#include "core/tokenizer/utf8.h"

namespace treespec {
namespace {

using nlohmann::json;

absl::Status FieldError(const std::string& file, const std::string& field,
                        const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": field '", field, "' ", what));
}

// spec[key], or `fallback` when absent. A reference: json::value() returns a
// copy, and copying recurses once per nesting level of a hostile document.
const json& Member(const json& spec, const char* key, const json& fallback) {
  auto it = spec.find(key);
  return it == spec.end() ? fallback : *it;
}
const json kNullJson;
const json kZeroJson = 0;
const json kTrueJson = true;
const json kMetaspaceJson = "\xE2\x96\x81";

}  // namespace

// Compiles the decoder chain into DecodeRules. Supported chains: per-token
// Replace / Strip / Metaspace steps, then ByteFallback or ByteLevel, then Fuse,
// then Strip of leading characters (the Llama-2 and GPT-2 layouts and their
// relatives). Per-token steps run here, once per vocabulary entry.
absl::Status BuildHfDecodeRules(const json& decoder, const std::string& file,
                                const std::vector<std::string>& tokens,
                                const std::vector<bool>& skip, DecodeRules* rules_out) {
  DecodeRules& rules = *rules_out;
  rules.byte_runs = DecodeRules::ByteRuns::kWholeRun;
  rules.skip_ends_byte_run = false;
  struct TokenOp {
    std::string kind;  // "Replace", "Strip", "Metaspace"
    std::string a, b;  // Replace: pattern, content; Strip / Metaspace: the character
    int start = 0, stop = 0;
    bool strip_first = false;  // Metaspace: drop replacements in the first token
  };
  std::vector<TokenOp> ops;
  bool byte_fallback = false, byte_level = false, fused = false, metaspace = false;
  std::vector<std::pair<const json*, std::string>> chain;
  if (decoder.is_null()) {
    rules.join_with_space = true;
  } else if (decoder.is_object() && decoder.value("type", "") == "Sequence") {
    auto list = decoder.find("decoders");
    if (list == decoder.end() || !list->is_array()) {
      return FieldError(file, "decoder.decoders", "must be a list");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      chain.push_back({&(*list)[i], absl::StrCat("decoder.decoders[", i, "]")});
    }
  } else {
    chain.push_back({&decoder, "decoder"});
  }
  auto unsupported = [&](const std::string& field, const std::string& why) {
    return absl::UnimplementedError(absl::StrCat(file, ": field '", field, "': ", why));
  };
  auto one_char = [](const std::string& s) {
    std::vector<char32_t> cps;
    std::vector<uint32_t> offsets;
    if (!IsValidUtf8(s)) return char32_t{0};
    DecodeUtf8(s, &cps, &offsets);
    return cps.size() == 1 ? cps[0] : char32_t{0};
  };
  for (const auto& [spec, field] : chain) {
    if (!spec->is_object() || !spec->contains("type") || !(*spec)["type"].is_string()) {
      return FieldError(file, field + ".type", "is missing or not a string");
    }
    const std::string type = (*spec)["type"].get<std::string>();
    const bool per_token = !byte_fallback && !byte_level && !fused;
    if (type == "Replace") {
      const json& p = Member(*spec, "pattern", kNullJson);
      if (!p.is_object() || !p.contains("String") || !p["String"].is_string() ||
          p["String"].get<std::string>().empty() || !Member(*spec, "content", kNullJson).is_string()) {
        return unsupported(field, "only Replace with a non-empty {\"String\": ...} pattern is supported");
      }
      if (!per_token) return unsupported(field, "Replace after ByteFallback/ByteLevel/Fuse");
      ops.push_back({"Replace", p["String"].get<std::string>(), (*spec)["content"].get<std::string>()});
    } else if (type == "Strip") {
      const json& content = Member(*spec, "content", kNullJson);
      const json& start = Member(*spec, "start", kZeroJson);
      const json& stop = Member(*spec, "stop", kZeroJson);
      if (!content.is_string() || one_char(content.get<std::string>()) == 0 ||
          !start.is_number_unsigned() || !stop.is_number_unsigned()) {
        return FieldError(file, field, "must have a one-character content and counts start/stop");
      }
      TokenOp op{"Strip", content.get<std::string>(), ""};
      op.start = static_cast<int>(std::min<uint64_t>(start.get<uint64_t>(), 1 << 20));
      op.stop = static_cast<int>(std::min<uint64_t>(stop.get<uint64_t>(), 1 << 20));
      if (per_token) {
        ops.push_back(op);
      } else if (byte_fallback && !fused) {
        return unsupported(field, "Strip between ByteFallback and Fuse");
      } else if (op.stop != 0 || rules.strip_leading != 0) {
        return unsupported(field, "Strip of trailing characters (or twice) after Fuse");
      } else {
        rules.strip_leading = op.start;
        rules.strip_char = one_char(op.a);
      }
    } else if (type == "Metaspace") {
      if (!per_token) return unsupported(field, "Metaspace after ByteFallback/ByteLevel/Fuse");
      const json& rep = Member(*spec, "replacement", kMetaspaceJson);
      if (!rep.is_string() || one_char(rep.get<std::string>()) == 0) {
        return FieldError(file, field + ".replacement", "must be one character");
      }
      TokenOp op{"Metaspace", rep.get<std::string>(), ""};
      const json& scheme = Member(*spec, "prepend_scheme", kNullJson);
      if (scheme.is_string()) {
        op.strip_first = scheme.get<std::string>() != "never";
      } else {
        op.strip_first = Member(*spec, "add_prefix_space", kTrueJson) == kTrueJson;
      }
      metaspace = true;
      ops.push_back(op);
    } else if (type == "ByteFallback") {
      if (!per_token) return unsupported(field, "ByteFallback after ByteLevel/Fuse");
      byte_fallback = true;
    } else if (type == "ByteLevel") {
      if (!per_token) return unsupported(field, "ByteLevel after ByteFallback/Fuse");
      byte_level = true;
      fused = true;
    } else if (type == "Fuse") {
      fused = true;
    } else {
      return unsupported(field + ".type", absl::StrCat("\"", type, "\" is not supported"));
    }
  }
  if (metaspace && (byte_fallback || byte_level)) {
    return unsupported("decoder", "Metaspace together with ByteFallback or ByteLevel");
  }
  rules.start = metaspace ? DecodeRules::Start::kFirstToken : DecodeRules::Start::kNever;

  auto apply = [&](std::string s, bool first) {
    for (const TokenOp& op : ops) {
      if (op.kind == "Replace") {
        std::string out;
        size_t pos = 0;
        while (true) {
          const size_t hit = s.find(op.a, pos);
          if (hit == std::string::npos) break;
          out.append(s, pos, hit - pos);
          out.append(op.b);
          pos = hit + op.a.size();
        }
        out.append(s, pos, std::string::npos);
        s = std::move(out);
      } else if (op.kind == "Metaspace") {
        std::string out;
        size_t pos = 0;
        while (true) {
          const size_t hit = s.find(op.a, pos);
          if (hit == std::string::npos) break;
          out.append(s, pos, hit - pos);
          if (!(first && op.strip_first)) out.push_back(' ');
          pos = hit + op.a.size();
        }
        out.append(s, pos, std::string::npos);
        s = std::move(out);
      } else {  // Strip
        for (int k = 0; k < op.start && s.compare(0, op.a.size(), op.a) == 0; ++k) {
          s.erase(0, op.a.size());
        }
        for (int k = 0; k < op.stop && s.size() >= op.a.size() &&
                        s.compare(s.size() - op.a.size(), op.a.size(), op.a) == 0;
             ++k) {
          s.erase(s.size() - op.a.size());
        }
      }
    }
    return s;
  };
  auto to_bytes = [](const std::string& s) {
    std::vector<char32_t> cps;
    std::vector<uint32_t> offsets;
    DecodeUtf8(s, &cps, &offsets);
    std::string out;
    for (char32_t cp : cps) {
      const int b = ByteLevelByte(cp);
      if (b < 0) return s;  // tokenizers keeps such tokens' own bytes
      out.push_back(static_cast<char>(b));
    }
    return out;
  };
  rules.pieces.assign(tokens.size(), DecodeRules::Piece());
  for (size_t id = 0; id < tokens.size(); ++id) {
    DecodeRules::Piece& p = rules.pieces[id];
    if (skip[id]) continue;  // kSkip
    std::string text = apply(tokens[id], false);
    if (byte_fallback && text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>' &&
        std::isxdigit(static_cast<uint8_t>(text[3])) && std::isxdigit(static_cast<uint8_t>(text[4]))) {
      p.kind = DecodeRules::Piece::Kind::kByte;
      p.byte = static_cast<uint8_t>(std::stoi(text.substr(3, 2), nullptr, 16));
      continue;
    }
    p.kind = DecodeRules::Piece::Kind::kText;
    p.text_at_start = apply(tokens[id], true);
    p.text = std::move(text);
    if (byte_level) {
      p.text = to_bytes(p.text);
      p.text_at_start = to_bytes(p.text_at_start);
    }
    p.strippable = p.text != p.text_at_start;
  }
  return absl::OkStatus();
}

}  // namespace treespec
