#include "rpc/cost_profile.h"

#include <elf.h>
#include <link.h>

#include <chrono>
#include <cmath>
#include <initializer_list>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::string(v) : fallback;
}

uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string LastComponent(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// INVALID_ARGUMENT naming the first field that is negative or not finite.
absl::Status CheckCoefficients(
    const char* message, std::initializer_list<std::pair<const char*, double>> fields) {
  for (const auto& [name, value] : fields) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          message, ".", name, ": want a finite number >= 0, got ", value));
    }
  }
  return absl::OkStatus();
}

// dl_iterate_phdr visits the main program first; this reads its
// NT_GNU_BUILD_ID note (the linker's hash of the linked output).
int ReadMainBuildId(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      const char* next = desc + ((note->n_descsz + 3) & ~3u);
      if (next > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
          std::string(name, 3) == "GNU") {
        for (uint32_t b = 0; b < note->n_descsz; ++b) {
          absl::StrAppendFormat(out, "%02x", static_cast<unsigned char>(desc[b]));
        }
        return 1;
      }
      p = next;
    }
  }
  return 1;  // only the main program
}

}  // namespace

std::string EngineBuildId() {
  static const std::string id = [] {
    std::string out;
    dl_iterate_phdr(ReadMainBuildId, &out);
    if (!out.empty()) return out;
    // No build-id note (a linker told not to write one): the executable's
    // size and modification time change with every relink too.
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return std::string("unknown");
    const auto size = std::filesystem::file_size(exe, ec);
    const auto mtime = std::filesystem::last_write_time(exe, ec);
    return absl::StrFormat("exe%016x", Fnv1a(absl::StrCat(
                                           exe.string(), " ", size, " ",
                                           mtime.time_since_epoch().count())));
  }();
  return id;
}

std::string DefaultCostCacheDir() {
  if (const char* v = std::getenv("TREESPEC_CACHE_DIR"); v != nullptr && v[0] != '\0') return v;
  const std::string xdg = EnvOr("XDG_CACHE_HOME", "");
  if (!xdg.empty()) return xdg + "/treespec";
  const std::string home = EnvOr("HOME", "");
  if (!home.empty()) return home + "/.cache/treespec";
  return "/tmp/treespec-cache";
}

std::string ModelIdentity(const std::string& model_path) {
  std::error_code ec;
  std::string fingerprint;
  if (std::filesystem::is_directory(model_path, ec)) {
    std::ifstream in(model_path + "/config.json", std::ios::binary);
    fingerprint.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    const auto size = std::filesystem::file_size(model_path, ec);
    if (!ec) fingerprint = absl::StrCat("size", size);
  }
  return absl::StrFormat("%s cfg=%016x", LastComponent(model_path), Fnv1a(fingerprint));
}

absl::StatusOr<LoadedProfile> LoadOrMeasureProfile(const std::string& cache_dir,
                                                   const std::string& model_key,
                                                   const std::string& device_key,
                                                   const MeasureFn& measure, std::ostream& warn) {
  LoadedProfile out;
  if (!cache_dir.empty()) {
    absl::StatusOr<StepCostModel> cached =
        StepCostModel::LoadFromCache(cache_dir, model_key, device_key);
    if (cached.ok()) {
      out.model = *std::move(cached);
      out.source = v1::COST_PROFILE_SOURCE_CACHE;
      return out;
    }
    if (!absl::IsNotFound(cached.status())) {
      warn << "warning: ignoring the cost profile cache entry: " << cached.status().message()
           << "; profiling again\n";
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  TS_ASSIGN_OR_RETURN(out.model, measure());
  out.profile_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
  out.model.model = model_key;
  out.model.device = device_key;
  out.source = v1::COST_PROFILE_SOURCE_MEASURED;
  if (cache_dir.empty()) return out;
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  absl::Status saved = ec ? absl::UnavailableError(absl::StrCat("cannot create ", cache_dir, ": ",
                                                                ec.message()))
                          : out.model.SaveToCache(cache_dir);
  if (!saved.ok()) warn << "warning: cost profile not cached: " << saved.message() << "\n";
  return out;
}

void ToProto(const LoadedProfile& p, v1::VerifyCostProfile* out) {
  const VerifyCostModel::Coefficients c = p.model.verify.coefficients();
  out->set_source(p.source);
  out->set_per_step_s(c.per_step);
  out->set_per_sequence_s(c.per_sequence);
  out->set_per_token_s(c.per_token);
  out->set_per_context_token_s(c.per_context_token);
  out->set_per_token_past_knee_s(c.per_token_past_knee);
  out->set_knee_tokens(c.knee_tokens);
  out->set_residual_scale(p.model.verify.model().residual_scale());
  out->set_key(absl::StrCat(p.model.model, " on ", p.model.device));
  out->set_profile_ns(p.profile_ns);
}

void ToProto(const LoadedProfile& p, v1::DraftCostProfile* out) {
  const DraftCostModel::Coefficients c = p.model.draft.coefficients();
  out->set_source(p.source);
  out->set_per_call_s(c.per_call);
  out->set_per_level_s(c.per_level);
  out->set_per_sequence_level_s(c.per_sequence_level);
  out->set_per_node_s(c.per_node);
  out->set_residual_scale(p.model.draft.model().residual_scale());
  out->set_key(absl::StrCat(p.model.model, " on ", p.model.device));
  out->set_profile_ns(p.profile_ns);
}

absl::StatusOr<VerifyCostModel> FromProto(const v1::VerifyCostProfile& p) {
  if (p.source() == v1::COST_PROFILE_SOURCE_UNSPECIFIED) {
    return absl::NotFoundError("verify_cost: no profile");
  }
  TS_RETURN_IF_ERROR(CheckCoefficients(
      "verify_cost", {{"per_step_s", p.per_step_s()},
                      {"per_sequence_s", p.per_sequence_s()},
                      {"per_token_s", p.per_token_s()},
                      {"per_context_token_s", p.per_context_token_s()},
                      {"per_token_past_knee_s", p.per_token_past_knee_s()},
                      {"knee_tokens", static_cast<double>(p.knee_tokens())}}));
  VerifyCostModel::Coefficients c;
  c.per_step = p.per_step_s();
  c.per_sequence = p.per_sequence_s();
  c.per_token = p.per_token_s();
  c.per_context_token = p.per_context_token_s();
  c.per_token_past_knee = p.per_token_past_knee_s();
  c.knee_tokens = p.knee_tokens();
  absl::StatusOr<VerifyCostModel> m = VerifyCostModel::FromCoefficients(c);
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat("verify_cost: ", m.status().message()));
  return m;
}

absl::StatusOr<DraftCostModel> FromProto(const v1::DraftCostProfile& p) {
  if (p.source() == v1::COST_PROFILE_SOURCE_UNSPECIFIED) {
    return absl::NotFoundError("draft_cost: no profile");
  }
  TS_RETURN_IF_ERROR(CheckCoefficients("draft_cost",
                                       {{"per_call_s", p.per_call_s()},
                                        {"per_level_s", p.per_level_s()},
                                        {"per_sequence_level_s", p.per_sequence_level_s()},
                                        {"per_node_s", p.per_node_s()}}));
  DraftCostModel::Coefficients c;
  c.per_call = p.per_call_s();
  c.per_level = p.per_level_s();
  c.per_sequence_level = p.per_sequence_level_s();
  c.per_node = p.per_node_s();
  absl::StatusOr<DraftCostModel> m = DraftCostModel::FromCoefficients(c);
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat("draft_cost: ", m.status().message()));
  return m;
}

}  // namespace treespec
