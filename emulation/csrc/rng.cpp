// One random generator per emulated device, independent of the CPU's default generator, so
// torch.xpu.manual_seed(s) reproduces xpu's random numbers without touching the CPU stream.
//
// The generators are CPUGeneratorImpl objects because the CPU kernels that do the sampling accept
// only those; the fallback passes the device's generator wherever an op's Generator? is None.
#include "emulation.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <mutex>
#include <vector>

namespace torchplug::emulation {

namespace {

// Created once per type by create_generators before the type is enabled, then only read.
std::array<std::vector<at::Generator>, kNumDeviceTypes> g_generators;

at::Generator& generator(c10::Device device) {
  check_index(device.type(), device.index());
  return g_generators[static_cast<size_t>(device.type())].at(device.index());
}

}  // namespace

void create_generators(c10::DeviceType type, int count) {
  auto& generators = g_generators[static_cast<size_t>(type)];
  while (static_cast<int>(generators.size()) < count) {
    generators.push_back(at::detail::createCPUGenerator(c10::default_rng_seed_val));
  }
}

void* generator_impl(c10::Device device) {
  return generator(device).unsafeGetGeneratorImpl();
}

void manual_seed(c10::Device device, uint64_t seed_value) {
  at::Generator& gen = generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed_value);
}

uint64_t initial_seed(c10::Device device) {
  at::Generator& gen = generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.current_seed();
}

uint64_t seed(c10::Device device) {
  at::Generator& gen = generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.seed();  // a fresh non-deterministic seed, as torch.cuda.seed() does
}

std::string get_rng_state(c10::Device device) {
  at::Generator& gen = generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor state = gen.get_state();
  return std::string(static_cast<const char*>(state.const_data_ptr()), state.nbytes());
}

void set_rng_state(c10::Device device, const std::string& bytes) {
  at::Generator& gen = generator(device);
  at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(state.mutable_data_ptr(), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);  // validates the size, like torch.cuda.set_rng_state
}

}  // namespace torchplug::emulation
