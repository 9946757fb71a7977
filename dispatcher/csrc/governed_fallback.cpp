// The governed CPU fallback: an op a backend has no kernel for runs on the CPU (inputs copied
// there, results and mutated arguments copied back), subject to a per-backend, per-op policy,
// and every use is counted.
#include <ATen/native/CPUFallback.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "dispatch.h"

namespace {

enum class Policy { Allow, Warn, Error };

Policy parse_policy(const std::string& name) {
  if (name == "allow") return Policy::Allow;
  if (name == "warn") return Policy::Warn;
  if (name == "error") return Policy::Error;
  TORCH_CHECK_VALUE(false, "torchplug: fallback policy must be 'allow', 'warn' or 'error', not '", name, "'");
}

std::string qualified(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

std::string argument_dtypes(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  std::ostringstream out;
  const size_t n = op.schema().arguments().size();
  const char* sep = "";
  for (auto it = stack.end() - n; it != stack.end(); ++it) {
    if (it->isTensor() && it->toTensor().defined()) {
      out << sep << it->toTensor().scalar_type();
      sep = ", ";
    }
  }
  return out.str();
}

class Governor {
 public:
  explicit Governor(std::string backend) : backend_(std::move(backend)) {}

  void set_policy(Policy policy, const std::optional<std::string>& op) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (op) {
      per_op_[*op] = policy;
    } else {
      default_ = policy;
    }
  }

  void run(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const auto name = qualified(op);
    Policy policy;
    bool first_warning = false;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      auto found = per_op_.find(name);
      policy = found == per_op_.end() ? default_ : found->second;
      if (policy != Policy::Error) {
        ++counts_[name];
        first_warning = policy == Policy::Warn && warned_.insert(name).second;
      }
    }
    // Refuse before anything runs, so no out= argument is half written.
    TORCH_CHECK_NOT_IMPLEMENTED(policy != Policy::Error,
        "torchplug: ", name, " has no kernel on ", backend_, " (dtypes: ", argument_dtypes(op, *stack),
        ") and its CPU fallback policy is 'error'. Fix: register a kernel with torchplug.dispatcher.kernel(\"",
        name, "\", backend=\"", backend_, "\"), or allow the fallback: TORCHPLUG_FALLBACK_OPS=", name,
        "=allow or torchplug.dispatcher.set_fallback_policy(\"", backend_, "\", \"allow\", ops=[\"", name, "\"])");
    if (first_warning) {
      TORCH_WARN("torchplug: ", name, " has no kernel on ", backend_, "; it runs on the CPU (inputs and results ",
                 "are copied). This warning is shown once per op; set TORCHPLUG_FALLBACK=allow to silence it ",
                 "or =error to forbid the fallback.");
    }
    // A view cannot alias device memory through a CPU copy: refuse it rather than return a copy.
    at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
  }

  std::map<std::string, uint64_t> counts() {
    std::lock_guard<std::mutex> guard(mutex_);
    return {counts_.begin(), counts_.end()};
  }

  void reset() {
    std::lock_guard<std::mutex> guard(mutex_);
    counts_.clear();
    warned_.clear();
  }

 private:
  std::string backend_;
  std::mutex mutex_;
  Policy default_ = Policy::Warn;
  std::map<std::string, Policy> per_op_;
  std::map<std::string, uint64_t> counts_;
  std::set<std::string> warned_;
};

class GovernedFallback final : public c10::OperatorKernel {
 public:
  explicit GovernedFallback(std::shared_ptr<Governor> governor) : governor_(std::move(governor)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    governor_->run(op, stack);
  }

 private:
  std::shared_ptr<Governor> governor_;
};

std::mutex governors_mutex;
std::map<std::string, std::shared_ptr<Governor>> governors;  // backend name -> its governor
std::vector<std::unique_ptr<torch::Library>> libraries;      // keep the registrations alive

std::shared_ptr<Governor> governor(const std::string& backend) {
  auto& found = governors[backend];
  if (!found) found = std::make_shared<Governor>(backend);
  return found;
}

torch::CppFunction governed(const std::string& backend) {
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<GovernedFallback>(governor(backend)));
}

// Serve every op without a kernel at `key` (a native backend's missing ops).
void install_for_key(const std::string& backend, const std::string& key) {
  std::lock_guard<std::mutex> guard(governors_mutex);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::parseDispatchKey(key), __FILE__, __LINE__);
  lib->fallback(governed(backend));
  libraries.push_back(std::move(lib));
}

// Serve `op` at `key` through the fallback although something else could run it (an emulated
// backend declaring an op its real device lacks).
void install_for_op(const std::string& backend, const std::string& key, const std::string& op) {
  std::lock_guard<std::mutex> guard(governors_mutex);
  const auto ns = op.substr(0, op.find("::"));
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::parseDispatchKey(key), __FILE__, __LINE__);
  const auto unqualified = op.substr(ns.size() + 2);
  lib->impl(unqualified.c_str(), governed(backend));
  libraries.push_back(std::move(lib));
}

void set_policy(const std::string& backend, const std::string& policy, const std::optional<std::string>& op) {
  std::lock_guard<std::mutex> guard(governors_mutex);
  governor(backend)->set_policy(parse_policy(policy), op);
}

std::map<std::string, std::map<std::string, uint64_t>> stats() {
  std::lock_guard<std::mutex> guard(governors_mutex);
  std::map<std::string, std::map<std::string, uint64_t>> out;
  for (auto& [backend, g] : governors) out[backend] = g->counts();
  return out;
}

void reset_stats() {
  std::lock_guard<std::mutex> guard(governors_mutex);
  for (auto& [backend, g] : governors) g->reset();
}

}  // namespace

void torchplug::bind_governed_fallback(pybind11::module_& m) {
  m.def("install_fallback_for_key", &install_for_key);
  m.def("install_fallback_for_op", &install_for_op);
  m.def("set_fallback_policy", &set_policy, pybind11::arg("backend"), pybind11::arg("policy"),
        pybind11::arg("op") = std::nullopt);
  m.def("fallback_stats", &stats);
  m.def("reset_fallback_stats", &reset_stats);
}
