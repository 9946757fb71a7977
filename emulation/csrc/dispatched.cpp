// Which operators reached an emulated device's dispatch key: the conformance suite's coverage audit
// asks, case by case, what its cases dispatched to the device (conformance/exercised.py). Recording
// is off until asked for; then each kernel the runtime registers notes its operator once.
#include "emulation.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace torchplug::emulation {

namespace {

std::atomic<bool> g_recording{false};
std::mutex g_mutex;
std::unordered_set<std::string> g_seen;   // every operator noted since recording began
std::vector<std::string> g_fresh;         // those not yet handed out by take_dispatched

}  // namespace

void note_dispatch(const c10::OperatorHandle& op) {
  if (!g_recording.load(std::memory_order_relaxed)) {
    return;
  }
  std::string name = c10::toString(op.operator_name());
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_seen.insert(name).second) {
    g_fresh.push_back(std::move(name));
  }
}

void record_dispatches(bool on) {
  g_recording.store(on, std::memory_order_relaxed);
}

std::vector<std::string> take_dispatched() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> fresh;
  fresh.swap(g_fresh);
  return fresh;
}

}  // namespace torchplug::emulation
