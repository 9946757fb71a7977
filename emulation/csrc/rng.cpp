// Random generators of the emulated devices, independent of the CPU's default generator, so
// torch.xpu.manual_seed(s) reproduces xpu's random numbers without touching the CPU stream.
//
// The CPU kernels that sample accept only CPU generators, so each device generator is a
// DeviceGenerator: a generator of the device (torch.Generator(device="cuda"), the device's default
// generators) around a CPU generator that holds the state. The fallback hands kernels that CPU
// generator, for an explicit generator of the device and wherever an op's Generator? is None.
#include "emulation.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <mutex>
#include <vector>

namespace torchplug::emulation {

namespace {

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  DeviceGenerator(c10::Device device, at::Generator host)
      : c10::GeneratorImpl(device, c10::DispatchKeySet(dispatch_key(device.type()))), host_(std::move(host)) {}

  const at::Generator& host() const {
    return host_;
  }
  // The public methods are called with this generator's mutex held; kernels lock the host's.
  // While the current stream captures a graph, CUDA's generator refuses what would read or change
  // its host-side state (graph_check_generator); reseeding with the same seed is a no-op.
  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(host_.mutex());
    if (graph_capturing(device())) {
      TORCH_CHECK(host_.current_seed() == seed, "CUDAGeneratorImpl::set_current_seed can be called during stream "
                  "capture only if new seed is the same as the original seed (torchplug's emulated ", device(),
                  " is capturing a graph on the current stream)");
      return;
    }
    host_.set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    graph_check_generator(device(), "Cannot call CUDAGeneratorImpl::set_offset");
    std::lock_guard<std::mutex> lock(host_.mutex());
    host_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    graph_check_generator(device(), "Cannot call CUDAGeneratorImpl::get_offset");
    std::lock_guard<std::mutex> lock(host_.mutex());
    return host_.get_offset();
  }
  uint64_t current_seed() const override {
    graph_check_generator(device(), "Cannot call CUDAGeneratorImpl::current_seed");
    std::lock_guard<std::mutex> lock(host_.mutex());
    return host_.current_seed();
  }
  uint64_t seed() override {
    graph_check_generator(device(), "Cannot call CUDAGeneratorImpl::seed");
    std::lock_guard<std::mutex> lock(host_.mutex());
    return host_.seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    graph_check_generator(device(), "Please ensure to utilize the CUDAGeneratorImpl::set_state_index method during capturing.");
    std::lock_guard<std::mutex> lock(host_.mutex());
    host_.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    graph_check_generator(device(), "Cannot call CUDAGeneratorImpl::current_seed");  // CUDA's get_state reads it
    std::lock_guard<std::mutex> lock(host_.mutex());
    return host_.unsafeGetGeneratorImpl()->get_state();
  }

 private:
  DeviceGenerator* clone_impl() const override {
    std::lock_guard<std::mutex> lock(host_.mutex());
    return new DeviceGenerator(device(), host_.clone());
  }

  mutable at::Generator host_;  // mutable: its mutex is locked in const methods
};

at::Generator make_generator(c10::Device device) {
  return at::make_generator<DeviceGenerator>(device, at::detail::createCPUGenerator(c10::default_rng_seed_val));
}

// Created once per type by create_generators before the type is enabled, then only read.
std::array<std::vector<at::Generator>, kNumDeviceTypes> g_generators;

c10::Device checked(c10::Device device) {
  configure_on_first_use(device.type());
  TORCH_CHECK(is_emulated(device.type()), "no generator: the ", device.type(), " device type is not emulated");
  return resolve(device);
}

}  // namespace

void create_generators(c10::DeviceType type, int count) {
  auto& generators = g_generators[static_cast<size_t>(type)];
  while (static_cast<int>(generators.size()) < count) {
    generators.push_back(make_generator(c10::Device(type, static_cast<c10::DeviceIndex>(generators.size()))));
  }
}

at::Generator& default_generator(c10::Device device) {
  device = checked(device);
  return g_generators[static_cast<size_t>(device.type())].at(device.index());
}

at::Generator new_generator(c10::Device device) {
  return make_generator(checked(device));
}

at::Generator host_generator(const at::Generator& generator) {
  auto* impl = dynamic_cast<const DeviceGenerator*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK_TYPE(impl != nullptr, "a generator of the emulated ", generator.device(),
                   " device must come from torch.Generator(device=...) or the device's default generators");
  return impl->host();
}

void* generator_impl(c10::Device device) {
  return host_generator(default_generator(device)).unsafeGetGeneratorImpl();
}

void manual_seed(c10::Device device, uint64_t seed_value) {
  at::Generator& gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.unsafeGetGeneratorImpl()->set_current_seed(seed_value);
}

uint64_t initial_seed(c10::Device device) {
  at::Generator& gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.current_seed();
}

uint64_t seed(c10::Device device) {
  at::Generator& gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.unsafeGetGeneratorImpl()->seed();  // a fresh non-deterministic seed, as torch.cuda.seed() does
}

std::string get_rng_state(c10::Device device) {
  at::Generator& gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor state = gen.get_state();
  return std::string(static_cast<const char*>(state.const_data_ptr()), state.nbytes());
}

void set_rng_state(c10::Device device, const std::string& bytes) {
  at::Generator& gen = default_generator(device);
  at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(state.mutable_data_ptr(), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.unsafeGetGeneratorImpl()->set_state(*state.unsafeGetTensorImpl());  // validates the size
}

}  // namespace torchplug::emulation
