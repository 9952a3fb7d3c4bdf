// The Kubernetes manifests (k8s/): each overlay is rendered with
// `kubectl kustomize`, converted to JSON (python3 + PyYAML) and checked:
// every container has gRPC probes on its health port and resources; every
// flag exists in the binary's --helpfull and ports agree with the flags;
// images and model paths come from one place; shutdown, disruption budgets
// and autoscaling are wired; the TP group forms through the leader's DNS name
// and its collective traffic stays inside the group. Skips (with a message)
// when kubectl or PyYAML is missing.
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/ops_testing.h"

namespace treespec::testing {
namespace {

using nlohmann::json;

// Runs `command` under bash; returns its stdout, or nullopt on a non-zero exit.
std::optional<std::string> Shell(const std::string& command) {
  const std::string full = "bash -c 'set -o pipefail; " + command + "' 2>/dev/null";
  FILE* f = popen(full.c_str(), "r");
  if (f == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  if (pclose(f) != 0) return std::nullopt;
  return out;
}

std::string SkipReason() {
  if (!Shell("command -v kubectl")) return "kubectl is not installed; the k8s manifests are untested";
  if (!Shell("python3 -c \"import yaml\"")) {
    return "python3 with PyYAML is not installed; the k8s manifests are untested";
  }
  return "";
}

// The rendered overlay as a JSON array of objects.
json Render(const std::string& overlay) {
  static std::map<std::string, json> cache;
  auto it = cache.find(overlay);
  if (it != cache.end()) return it->second;
  const std::string dir = std::string(TREESPEC_SOURCE_DIR) + "/k8s/overlays/" + overlay;
  std::optional<std::string> out = Shell(
      "kubectl kustomize " + dir +
      " | python3 -c \"import sys, json, yaml; "
      "json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)\"");
  json j = out ? json::parse(*out, nullptr, false) : json();
  cache[overlay] = j;
  return j;
}

// Flag names (underscored) a binary's --helpfull lists.
std::set<std::string> HelpFlags(const std::string& binary) {
  static std::map<std::string, std::set<std::string>> cache;
  auto it = cache.find(binary);
  if (it != cache.end()) return it->second;
  std::set<std::string> flags;
  auto r = RunProcess({BinaryPath(binary), "--helpfull"}, std::chrono::milliseconds(30000));
  if (r.ok()) {
    std::regex re("--([a-z0-9_]+) \\(");
    for (std::sregex_iterator m(r->stdout_text.begin(), r->stdout_text.end(), re), end; m != end;
         ++m) {
      flags.insert((*m)[1]);
    }
  }
  cache[binary] = flags;
  return flags;
}

std::vector<json> OfKind(const json& docs, const std::string& kind) {
  std::vector<json> out;
  for (const json& d : docs) {
    if (d.value("kind", "") == kind) out.push_back(d);
  }
  return out;
}

std::vector<json> Workloads(const json& docs) {
  std::vector<json> out = OfKind(docs, "Deployment");
  for (const json& s : OfKind(docs, "StatefulSet")) out.push_back(s);
  return out;
}

json ConfigMap(const json& docs) {
  for (const json& c : OfKind(docs, "ConfigMap")) {
    if (absl::StartsWith(c["metadata"]["name"].get<std::string>(), "treespec-config")) return c;
  }
  return json();
}

// "--a-b=v" -> {"a_b", "v"}.
std::map<std::string, std::string> Flags(const json& container) {
  std::map<std::string, std::string> out;
  for (const json& a : container.value("args", json::array())) {
    std::string arg = a.get<std::string>();
    if (!absl::StartsWith(arg, "--")) continue;
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    for (char& c : name) c = c == '-' ? '_' : c;
    out[name] = eq == std::string::npos ? "" : arg.substr(eq + 1);
  }
  return out;
}

int Port(const json& container, const std::string& name) {
  for (const json& p : container.value("ports", json::array())) {
    if (p.value("name", "") == name) return p["containerPort"].get<int>();
  }
  return -1;
}

int PortOf(const std::string& host_port) {
  int port = -1;
  if (!absl::SimpleAtoi(host_port.substr(host_port.rfind(':') + 1), &port)) return -1;
  return port;
}

bool Selects(const json& match_labels, const json& labels) {
  if (!match_labels.is_object() || match_labels.empty()) return false;
  for (const auto& [k, v] : match_labels.items()) {
    if (!labels.contains(k) || labels[k] != v) return false;
  }
  return true;
}

class K8sTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (std::string reason = SkipReason(); !reason.empty()) GTEST_SKIP() << reason;
    docs_ = Render(GetParam());
    ASSERT_TRUE(docs_.is_array() && !docs_.empty()) << "kubectl kustomize k8s/overlays/"
                                                    << GetParam() << " failed";
  }
  json docs_;
};

TEST_P(K8sTest, EveryContainerHasProbesResourcesAndKnownFlags) {
  const json cm = ConfigMap(docs_);
  ASSERT_TRUE(cm.is_object()) << "no treespec-config ConfigMap";
  for (const json& w : Workloads(docs_)) {
    const std::string name = w["metadata"]["name"];
    const json& pod = w["spec"]["template"];
    for (const json& c : pod["spec"]["containers"]) {
      SCOPED_TRACE(name + "/" + c["name"].get<std::string>());
      ASSERT_TRUE(c.contains("command"));
      const std::string cmd = c["command"][0];
      const std::string binary = cmd.substr(cmd.rfind('/') + 1);
      const std::set<std::string> known = HelpFlags(binary);
      ASSERT_FALSE(known.empty()) << "no --helpfull from " << binary;
      const std::map<std::string, std::string> flags = Flags(c);
      for (const auto& [flag, value] : flags) {
        EXPECT_TRUE(known.count(flag)) << binary << " has no flag --" << flag;
      }
      // Ports agree with the flags.
      const int health = Port(c, "health");
      ASSERT_GT(health, 0) << "no port named health";
      ASSERT_TRUE(flags.count("health_port"));
      EXPECT_EQ(flags.at("health_port"), std::to_string(health));
      ASSERT_TRUE(flags.count("listen"));
      EXPECT_EQ(PortOf(flags.at("listen")), Port(c, "grpc"));
      ASSERT_TRUE(flags.count("metrics_port"));
      EXPECT_EQ(flags.at("metrics_port"), std::to_string(Port(c, "metrics")));
      EXPECT_EQ(pod["metadata"]["annotations"].value("prometheus.io/port", ""),
                flags.at("metrics_port"));
      // gRPC probes on the plaintext health port; liveness asks "liveness".
      for (const char* probe : {"startupProbe", "readinessProbe", "livenessProbe"}) {
        ASSERT_TRUE(c.contains(probe)) << probe;
        ASSERT_TRUE(c[probe].contains("grpc")) << probe << " is not a gRPC probe";
        EXPECT_EQ(c[probe]["grpc"]["port"], health) << probe;
      }
      EXPECT_EQ(c["livenessProbe"]["grpc"].value("service", ""), "liveness");
      EXPECT_EQ(c["readinessProbe"]["grpc"].value("service", ""), "");
      for (const char* kind : {"requests", "limits"}) {
        ASSERT_TRUE(c.contains("resources") && c["resources"].contains(kind)) << kind;
        EXPECT_TRUE(c["resources"][kind].contains("cpu")) << kind;
        EXPECT_TRUE(c["resources"][kind].contains("memory")) << kind;
      }
      // Every $(VAR) in the args is defined (env or the ConfigMap).
      std::set<std::string> vars;
      for (const json& e : c.value("env", json::array())) vars.insert(e["name"].get<std::string>());
      for (const json& e : c.value("envFrom", json::array())) {
        if (e.contains("configMapRef") && e["configMapRef"]["name"] == cm["metadata"]["name"]) {
          for (const auto& [k, v] : cm["data"].items()) vars.insert(k);
        }
      }
      std::regex ref("\\$\\(([A-Z_]+)\\)");
      for (const auto& [flag, value] : flags) {
        for (std::sregex_iterator m(value.begin(), value.end(), ref), end; m != end; ++m) {
          EXPECT_TRUE(vars.count((*m)[1])) << "--" << flag << " uses undefined $(" << (*m)[1]
                                           << ")";
        }
      }
    }
  }
}

TEST_P(K8sTest, ImagesAndModelPathsComeFromOnePlace) {
  std::set<std::string> images;
  for (const json& w : Workloads(docs_)) {
    for (const json& c : w["spec"]["template"]["spec"]["containers"]) {
      images.insert(c["image"].get<std::string>());
      const std::map<std::string, std::string> flags = Flags(c);
      for (const char* f : {"model", "tokenizer"}) {
        if (!flags.count(f)) continue;
        EXPECT_TRUE(std::regex_match(flags.at(f), std::regex("\\$\\([A-Z_]+\\)")))
            << w["metadata"]["name"] << ": --" << f << "=" << flags.at(f)
            << " must come from the ConfigMap";
      }
    }
  }
  ASSERT_EQ(images.size(), 1u) << "every container runs the one image of `images:`";
  EXPECT_NE(*images.begin(), "treespec") << "the kustomize images entry was not applied";
  // The model directories appear in the ConfigMap and nowhere else.
  const json cm = ConfigMap(docs_);
  for (const char* key : {"TARGET_MODEL", "DRAFTER_MODEL"}) {
    ASSERT_TRUE(cm["data"].contains(key)) << key;
    const std::string path = cm["data"][key];
    int places = 0;
    for (const json& d : docs_) places += d.dump().find("\"" + path + "\"") != std::string::npos;
    EXPECT_EQ(places, 1) << path << " is spelled out outside the ConfigMap";
  }
}

TEST_P(K8sTest, ShutdownBudgetsAutoscalingAndServices) {
  const std::vector<json> pdbs = OfKind(docs_, "PodDisruptionBudget");
  const std::vector<json> hpas = OfKind(docs_, "HorizontalPodAutoscaler");
  for (const json& w : Workloads(docs_)) {
    const std::string name = w["metadata"]["name"];
    SCOPED_TRACE(name);
    const json& spec = w["spec"]["template"]["spec"];
    const json& labels = w["spec"]["template"]["metadata"]["labels"];
    for (const json& c : spec["containers"]) {
      // preStop sleep + --shutdown-grace-s fit in the termination grace period.
      ASSERT_TRUE(c.contains("lifecycle") && c["lifecycle"].contains("preStop"));
      const json cmd = c["lifecycle"]["preStop"]["exec"]["command"];
      int sleep_s = 0;
      ASSERT_TRUE(absl::SimpleAtoi(cmd.back().get<std::string>(), &sleep_s));
      int grace = 0;
      ASSERT_TRUE(absl::SimpleAtoi(Flags(c).at("shutdown_grace_s"), &grace));
      EXPECT_GE(spec.value("terminationGracePeriodSeconds", 30), sleep_s + grace + 5);
    }
    int matching_pdbs = 0;
    for (const json& p : pdbs) matching_pdbs += Selects(p["spec"]["selector"]["matchLabels"], labels);
    EXPECT_EQ(matching_pdbs, 1) << "one PodDisruptionBudget per workload";
    if (name == "treespec-coordinator" || name == "treespec-drafter") {
      bool scaled = false;
      for (const json& h : hpas) {
        if (h["spec"]["scaleTargetRef"]["name"] != name) continue;
        for (const json& m : h["spec"]["metrics"]) {
          const std::string type = m["type"];
          const json& src = type == "Pods" ? m["pods"] : m["external"];
          scaled |= src["metric"]["name"] == "treespec_queue_depth";
        }
      }
      EXPECT_TRUE(scaled) << "no HPA on treespec_queue_depth";
    }
  }
  // Every Service selects pods and targets named ports they declare.
  for (const json& s : OfKind(docs_, "Service")) {
    SCOPED_TRACE(s["metadata"]["name"].get<std::string>());
    bool found = false;
    for (const json& w : Workloads(docs_)) {
      if (!Selects(s["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"]) &&
          !(s["spec"]["selector"].contains("statefulset.kubernetes.io/pod-name") &&
            w["kind"] == "StatefulSet")) {
        continue;
      }
      found = true;
      const json& c = w["spec"]["template"]["spec"]["containers"][0];
      for (const json& p : s["spec"]["ports"]) {
        if (p["targetPort"].is_string()) {
          EXPECT_GT(Port(c, p["targetPort"]), 0) << "no container port " << p["targetPort"];
        }
      }
    }
    EXPECT_TRUE(found) << "the Service selects no workload";
  }
  // The coordinator's --workers and --drafters name Services and their ports.
  const json cm = ConfigMap(docs_);
  std::vector<std::string> targets = {cm["data"]["WORKERS"]};
  for (absl::string_view d : absl::StrSplit(cm["data"]["DRAFTERS"].get<std::string>(), ',')) {
    targets.push_back(std::string(d.substr(d.find('=') + 1)));
  }
  for (const std::string& t : targets) {
    const std::string host = t.substr(0, t.rfind(':'));
    bool ok = false;
    for (const json& s : OfKind(docs_, "Service")) {
      if (s["metadata"]["name"] != host) continue;
      for (const json& p : s["spec"]["ports"]) ok |= p["port"] == PortOf(t);
    }
    EXPECT_TRUE(ok) << t << " is not a Service port";
  }
}

// The coordinator authenticates clients with tokens from a Secret mounted as a
// directory (no subPath: kubelet's updates must reach the file for rotation),
// readable by the container's user.
TEST_P(K8sTest, CoordinatorReadsItsTokensFromAMountedSecret) {
  bool seen = false;
  for (const json& w : Workloads(docs_)) {
    if (w["metadata"]["name"] != "treespec-coordinator") continue;
    seen = true;
    const json& spec = w["spec"]["template"]["spec"];
    const json& c = spec["containers"][0];
    const auto flags = Flags(c);
    ASSERT_TRUE(flags.count("auth_token_file")) << "the coordinator runs without --auth-token-file";
    const std::string file = flags.at("auth_token_file");
    const std::string dir = file.substr(0, file.rfind('/'));
    std::string volume;
    for (const json& m : c.value("volumeMounts", json::array())) {
      if (m["mountPath"] != dir) continue;
      volume = m["name"];
      EXPECT_FALSE(m.contains("subPath")) << "a subPath mount never sees Secret updates";
      EXPECT_EQ(m.value("readOnly", false), true);
    }
    ASSERT_FALSE(volume.empty()) << "nothing is mounted at " << dir;
    bool is_secret = false;
    for (const json& v : spec["volumes"]) {
      if (v["name"] != volume || !v.contains("secret")) continue;
      is_secret = true;
      const int mode = v["secret"].value("defaultMode", 0644);
      const bool group_readable = (mode & 040) != 0 && spec["securityContext"].contains("fsGroup");
      EXPECT_TRUE((mode & 04) != 0 || group_readable)
          << "mode " << mode << " does not let the container's user read the tokens";
    }
    EXPECT_TRUE(is_secret) << volume << " is not a Secret volume";
  }
  EXPECT_TRUE(seen) << "no treespec-coordinator workload";
}

// The image the overlay runs is one tools/container_build.sh builds from the
// Containerfile, and that file matches the manifests: the user every pod runs
// as, every container port EXPOSEd, every command a binary the image builds
// into /usr/local/bin, and model paths under /opt/treespec/models/demo copied
// from models/demo.
TEST_P(K8sTest, ImageIsTheContainerfiles) {
  const std::string src = TREESPEC_SOURCE_DIR;
  std::ifstream cf(src + "/Containerfile"), script(src + "/tools/container_build.sh");
  ASSERT_TRUE(cf && script) << "Containerfile or tools/container_build.sh missing";
  const std::string containerfile((std::istreambuf_iterator<char>(cf)), {});
  const std::string build_script((std::istreambuf_iterator<char>(script)), {});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(containerfile, m, std::regex("\\nUSER ([0-9]+)")));
  const int image_uid = std::stoi(m[1]);
  ASSERT_TRUE(std::regex_search(containerfile, m, std::regex("\\nEXPOSE ([0-9 ]+)")));
  const std::string exposed = " " + std::string(m[1]) + " ";
  ASSERT_TRUE(std::regex_search(containerfile, m, std::regex("cmake --build [^\\n]*--target ([a-z0-9_ \\\\\\n-]+)")));
  const std::string built = m[1];
  EXPECT_NE(containerfile.find("COPY --from=builder /out/bin/ /usr/local/bin/"), std::string::npos);
  for (const json& w : Workloads(docs_)) {
    const json& pod = w["spec"]["template"]["spec"];
    const std::string name = w["metadata"]["name"];
    EXPECT_EQ(pod["securityContext"].value("runAsUser", -1), image_uid) << name;
    for (const json& c : pod["containers"]) {
      EXPECT_NE(build_script.find("IMAGE=" + c["image"].get<std::string>() + ";"),
                std::string::npos)
          << name << ": image " << c["image"] << " is not one tools/container_build.sh builds";
      const std::string cmd = c["command"][0];
      ASSERT_TRUE(absl::StartsWith(cmd, "/usr/local/bin/")) << name << ": " << cmd;
      const std::string bin = cmd.substr(std::string("/usr/local/bin/").size());
      EXPECT_TRUE(std::regex_search(built, std::regex("(^|\\s)" + bin + "(\\s|$)")))
          << name << ": the Containerfile does not build " << bin;
      for (const json& p : c.value("ports", json::array())) {
        const std::string port = std::to_string(p["containerPort"].get<int>());
        EXPECT_NE(exposed.find(" " + port + " "), std::string::npos)
            << name << ": port " << port << " is not EXPOSEd by the Containerfile";
      }
    }
  }
  const std::string demo = "/opt/treespec/models/demo/";
  // Named: a range-for over a member of a temporary reads it after it is
  // destroyed (ASan: heap-use-after-free).
  const json config_map = ConfigMap(docs_);
  for (const auto& [key, value] : config_map.at("data").items()) {
    const std::string path = value.get<std::string>();
    if (!absl::StartsWith(path, demo)) continue;
    EXPECT_NE(containerfile.find("models/demo /opt/treespec/models/demo"), std::string::npos)
        << key << "=" << path << " but the Containerfile does not copy models/demo there";
    EXPECT_TRUE(std::ifstream(src + "/models/demo/" + path.substr(demo.size()) + "/config.json"))
        << key << "=" << path << " names no model of models/demo";
  }
}

INSTANTIATE_TEST_SUITE_P(Overlays, K8sTest, ::testing::Values("cpu-demo", "gpu-tp2"));

TEST(K8sGpuTp2Test, TensorParallelGroupFormsThroughTheLeadersDnsName) {
  if (std::string reason = SkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  const json docs = Render("gpu-tp2");
  ASSERT_TRUE(docs.is_array());
  const std::vector<json> sts = OfKind(docs, "StatefulSet");
  ASSERT_EQ(sts.size(), 1u);
  const json& group = sts[0];
  const std::string name = group["metadata"]["name"];
  const int replicas = group["spec"]["replicas"];
  EXPECT_EQ(replicas, 2);
  EXPECT_EQ(group["spec"].value("podManagementPolicy", ""), "Parallel");
  const std::string headless = group["spec"]["serviceName"];
  bool have_headless = false;
  for (const json& s : OfKind(docs, "Service")) {
    if (s["metadata"]["name"] != headless) continue;
    have_headless = true;
    EXPECT_EQ(s["spec"].value("clusterIP", ""), "None");
    EXPECT_TRUE(s["spec"].value("publishNotReadyAddresses", false))
        << "rank 1 must resolve rank 0 before rank 0 is ready";
  }
  EXPECT_TRUE(have_headless);
  const json& pod = group["spec"]["template"];
  const json& c = pod["spec"]["containers"][0];
  const std::map<std::string, std::string> flags = Flags(c);
  EXPECT_EQ(flags.at("tp_size"), std::to_string(replicas));
  EXPECT_EQ(flags.at("tp_rank"), "$(TP_RANK)");
  bool rank_from_ordinal = false;
  for (const json& e : c["env"]) {
    if (e["name"] == "TP_RANK") {
      rank_from_ordinal = e["valueFrom"]["fieldRef"]["fieldPath"].get<std::string>().find(
                              "apps.kubernetes.io/pod-index") != std::string::npos;
    }
  }
  EXPECT_TRUE(rank_from_ordinal);
  const std::string rdv = flags.at("rendezvous");
  EXPECT_TRUE(absl::StartsWith(rdv, name + "-0." + headless + "."))
      << "--rendezvous=" << rdv << " is not rank 0's DNS name";
  EXPECT_EQ(PortOf(rdv), Port(c, "rendezvous"));
  EXPECT_EQ(c["resources"]["limits"].value("nvidia.com/gpu", ""), "1");
  std::string shm_volume;
  for (const json& m : c["volumeMounts"]) {
    if (m["mountPath"] == "/dev/shm") shm_volume = m["name"];
  }
  ASSERT_FALSE(shm_volume.empty()) << "no /dev/shm volume";
  for (const json& v : pod["spec"]["volumes"]) {
    if (v["name"] == shm_volume) {
      EXPECT_EQ(v["emptyDir"].value("medium", ""), "Memory");
    }
  }
  // The coordinator reaches rank 0 only.
  const json cm = ConfigMap(docs);
  const std::string workers = cm["data"]["WORKERS"];
  for (const json& s : OfKind(docs, "Service")) {
    if (s["metadata"]["name"] == workers.substr(0, workers.rfind(':'))) {
      EXPECT_EQ(s["spec"]["selector"].value("statefulset.kubernetes.io/pod-name", ""), name + "-0");
    }
  }
  // Collective traffic stays inside the group: the only rule without port
  // limits admits the group's own pods.
  const std::vector<json> policies = OfKind(docs, "NetworkPolicy");
  ASSERT_EQ(policies.size(), 1u);
  const json& np = policies[0]["spec"];
  EXPECT_TRUE(Selects(np["podSelector"]["matchLabels"], pod["metadata"]["labels"]));
  int open_rules = 0;
  for (const json& rule : np["ingress"]) {
    if (rule.contains("ports")) continue;
    ++open_rules;
    ASSERT_EQ(rule["from"].size(), 1u);
    EXPECT_TRUE(rule["from"][0].contains("podSelector"));
    EXPECT_FALSE(rule["from"][0].contains("namespaceSelector"));
    EXPECT_EQ(rule["from"][0]["podSelector"]["matchLabels"], np["podSelector"]["matchLabels"]);
  }
  EXPECT_EQ(open_rules, 1);
}

TEST(K8sCpuDemoTest, OneWorkerOneMambaDrafterNoGpus) {
  if (std::string reason = SkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  const json docs = Render("cpu-demo");
  ASSERT_TRUE(docs.is_array());
  EXPECT_TRUE(OfKind(docs, "StatefulSet").empty());
  std::set<std::string> names;
  for (const json& w : Workloads(docs)) names.insert(w["metadata"]["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"treespec-coordinator", "treespec-worker",
                                          "treespec-drafter"}));
  EXPECT_EQ(ConfigMap(docs)["data"]["DRAFTER_KIND"], "mamba");
  EXPECT_TRUE(absl::StrContains(ConfigMap(docs)["data"]["TARGET_MODEL"].get<std::string>(),
                                "models/demo"));
  EXPECT_EQ(docs.dump().find("nvidia.com/gpu"), std::string::npos);
}

}  // namespace
}  // namespace treespec::testing
