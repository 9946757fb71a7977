// A torch build with the device's own runtime (a CUDA build on a machine without a GPU) registers
// that runtime's kernels under the device's dispatch key, and a per-op kernel wins over the
// emulator's boxed fallback. So when such a type is emulated, every op with a kernel there is
// given the host path instead (`run_on_host`, the fallback's own work), as if the build had none:
// the same kernels then serve emulated cuda on a CUDA build as on the CPU wheel.
//
// torch warns once per overridden kernel ("Overriding a previously registered kernel"); those
// warnings, about 1,300 on a CUDA build, are ours to expect and are dropped while registering.
// Other warnings pass through.
#include "emulation.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace torchplug::emulation {

namespace {

class DropOverrideWarnings final : public c10::WarningHandler {
 public:
  explicit DropOverrideWarnings(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("Overriding a previously registered kernel") == std::string::npos) {
      next_->process(warning);
    }
  }

 private:
  c10::WarningHandler* next_;
};

// c10d's kernels ask the process group for the tensors' device backend; torchplug's distributed
// part routes them for emulated devices, on every build alike.
bool keeps_its_kernel(const c10::OperatorName& name) {
  return name.name.rfind("c10d::", 0) == 0;
}

std::mutex g_adopt_mutex;
std::vector<std::unique_ptr<torch::Library>> g_adopting_libraries;  // registrations live while loaded
std::set<std::pair<std::string, std::string>> g_adopted[kNumDeviceTypes];  // (name, overload) per type

}  // namespace

QuietOverrides::QuietOverrides()
    : handler_(std::make_unique<DropOverrideWarnings>(c10::WarningUtils::get_warning_handler())),
      previous_(c10::WarningUtils::get_warning_handler()) {
  c10::WarningUtils::set_warning_handler(handler_.get());
}

QuietOverrides::~QuietOverrides() {
  c10::WarningUtils::set_warning_handler(previous_);
}

namespace {

// Adopts `names` (all ops with a kernel under the type's key when empty) that were not seen before.
int64_t adopt(c10::DeviceType type, const std::vector<c10::OperatorName>& names) {
  std::lock_guard<std::mutex> lock(g_adopt_mutex);
  const c10::DispatchKey key = dispatch_key(type);
  auto& adopted = g_adopted[static_cast<int>(type)];
  QuietOverrides quiet;
  std::map<std::string, torch::Library*> by_namespace;  // one IMPL fragment per namespace and call
  int64_t count = 0;
  for (const c10::OperatorName& name : names) {
    if (keeps_its_kernel(name) || !adopted.emplace(name.name, name.overload_name).second) {
      continue;
    }
    const auto separator = name.name.find("::");
    const std::string ns = name.name.substr(0, separator);
    torch::Library*& library = by_namespace[ns];
    if (library == nullptr) {
      g_adopting_libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, __FILE__, __LINE__));
      library = g_adopting_libraries.back().get();
    }
    const std::string op = name.name.substr(separator + 2);
    const std::string qualified = name.overload_name.empty() ? op : op + "." + name.overload_name;
    library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
    ++count;
  }
  return count;
}

// Every operator defined from the moment it is installed, in order: new_ops_since() reads the ones
// a library defined while it loaded. Called under the dispatcher's lock, so it only records.
class DefinedOps final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle& op) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (recording) {
      names.push_back(op.operator_name());
    }
  }
  void onOperatorDeregistered(const c10::OperatorHandle& /*op*/) override {}

  std::mutex mutex;
  bool recording = false;  // off while addRegistrationListener replays the ops defined before
  std::vector<c10::OperatorName> names;
};

DefinedOps* g_defined_ops = nullptr;

}  // namespace

int64_t adopt_native_kernels(c10::DeviceType type) {
  return adopt(type, c10::Dispatcher::singleton().getAllOpNamesForDispatchKey(dispatch_key(type)));
}

int64_t defined_ops_mark() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto listener = std::make_unique<DefinedOps>();
    g_defined_ops = listener.get();
    // Kept for the process: the listener must outlive every later registration.
    new c10::RegistrationHandleRAII(c10::Dispatcher::singleton().addRegistrationListener(std::move(listener)));
    std::lock_guard<std::mutex> lock(g_defined_ops->mutex);
    g_defined_ops->recording = true;
  });
  std::lock_guard<std::mutex> lock(g_defined_ops->mutex);
  return static_cast<int64_t>(g_defined_ops->names.size());
}

int64_t adopt_native_kernels_since(c10::DeviceType type, int64_t mark) {
  std::vector<c10::OperatorName> defined;
  {
    std::lock_guard<std::mutex> lock(g_defined_ops->mutex);
    defined.assign(g_defined_ops->names.begin() + mark, g_defined_ops->names.end());
  }
  const c10::DispatchKey key = dispatch_key(type);
  std::vector<c10::OperatorName> with_kernel;
  for (const c10::OperatorName& name : defined) {
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (op && op->hasKernelForDispatchKey(key)) {
      with_kernel.push_back(name);
    }
  }
  return adopt(type, with_kernel);
}

}  // namespace torchplug::emulation
