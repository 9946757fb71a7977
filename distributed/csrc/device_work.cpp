// The c10d Work of a collective that gloo runs on host tensors standing for device tensors (host
// aliases of an emulated device's tensors, or host copies of a staged device's).
//
// Its future completes when gloo's does, after `finish` (a staged device's copy back), with the
// caller's device tensors in place of the host tensors (so DDP's comm hooks and async_op users
// see their own tensors, holding the results), or with gloo's failure
// raised as torch.distributed.DistBackendError naming the rank that caused it (peers.explain).
// All of it runs in C++ on gloo's thread, without the GIL, except the explanation of a failure.
// torch's own future-wrapping Work cannot stand in for this: its wait() returns normally when
// the future failed, which would turn a dead peer into a silently wrong result.
//
// Every such Work is also kept here until gloo's worker thread has let go of it (settle()). That
// thread drops its references after completing the future, and dropping the last reference to a
// tensor Python has seen takes the GIL. If that happens while the interpreter finalizes, CPython
// ends the thread inside a noexcept destructor and the process aborts ("terminate called without
// an active exception", at exit, after a successful run). Holding one reference here until the
// worker is done makes the final release happen on a Python thread instead.
#include "collectives.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace torchplug_distributed {

c10::IValue to_device(const c10::IValue& value, const AliasMap& aliases) {
  return map_tensors(value, [&](const at::Tensor& host) {
    auto found = aliases.find(host.unsafeGetTensorImpl());
    return found == aliases.end() ? host : found->second;
  });
}

namespace {

std::string explain(const std::string& op, const std::string& group, int group_rank, std::exception_ptr error) {
  std::string cause;
  try {
    std::rethrow_exception(std::move(error));
  } catch (const c10::Error& err) {
    cause = err.what_without_backtrace();
  } catch (const std::exception& err) {
    cause = err.what();
  }
  py::gil_scoped_acquire gil;
  return py::module_::import("torchplug.distributed.peers").attr("explain")(op, group, group_rank, cause)
      .cast<std::string>();
}

class DeviceWork : public c10d::Work {
 public:
  DeviceWork(c10::intrusive_ptr<c10d::Work> gloo, c10::intrusive_ptr<c10::ivalue::Future> future)
      : c10d::Work(-1, gloo->retrieveOpType()), gloo_(std::move(gloo)), future_(std::move(future)) {}

  bool isCompleted() override {
    return future_->completed();
  }

  bool isSuccess() const override {
    return future_->completed() && !future_->hasError();
  }

  std::exception_ptr exception() const override {
    return future_->exception_ptr();
  }

  int sourceRank() const override {
    return gloo_->sourceRank();
  }

  std::vector<at::Tensor> result() override {
    return future_->value().toTensorVector();
  }

  void synchronize() override {}  // host memory, or copied back already: nothing to order against

  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout != kNoTimeout) {
      try {
        gloo_->wait(timeout);
      } catch (...) {
        if (!gloo_->isCompleted()) {
          throw;  // the wait itself timed out; the collective may still finish
        }
        // gloo failed: the future, completed by the same event, carries the explained error.
      }
    }
    // Without a timeout of its own, wait on the future alone: one wake-up, not two. It completes
    // when gloo's work does, failures included (gloo applies the group's timeout itself).
    future_->wait();
    if (future_->hasError()) {
      std::rethrow_exception(future_->exception_ptr());
    }
    return true;
  }

  void abort() override {
    gloo_->abort();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  // True once only this Work holds gloo's: its worker thread has finished with it, callbacks included.
  bool released_by_gloo() const {
    return gloo_.use_count() == 1;
  }

 private:
  c10::intrusive_ptr<c10d::Work> gloo_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work of a send or recv, whose gloo work has no future, with a `finish` to run (a staged
// recv's copy back): it runs once gloo's work has succeeded, when the caller first sees it complete.
class FinishedOnWait final : public c10d::Work {
 public:
  FinishedOnWait(c10::intrusive_ptr<c10d::Work> gloo, std::function<void()> finish)
      : c10d::Work(-1, gloo->retrieveOpType()), gloo_(std::move(gloo)), finish_(std::move(finish)) {}

  bool isCompleted() override {
    if (!gloo_->isCompleted()) {
      return false;
    }
    if (gloo_->exception() == nullptr) {
      std::call_once(finished_, finish_);
    }
    return true;
  }

  bool isSuccess() const override {
    return gloo_->isCompleted() && gloo_->exception() == nullptr;
  }

  std::exception_ptr exception() const override {
    return gloo_->exception();
  }

  int sourceRank() const override {
    return gloo_->sourceRank();
  }

  bool wait(std::chrono::milliseconds timeout) override {
    gloo_->wait(timeout);  // raises gloo's own error
    std::call_once(finished_, finish_);
    return true;
  }

  void abort() override {
    gloo_->abort();
  }

 private:
  c10::intrusive_ptr<c10d::Work> gloo_;
  std::function<void()> finish_;
  std::once_flag finished_;
};

// Works gloo's worker threads may still hold (see the top of this file). Touched with the GIL held,
// except in settle()'s wait, which only reads refcounts.
std::mutex kept_mutex;
std::vector<c10::intrusive_ptr<DeviceWork>> kept;

// Drop the kept works gloo has let go of. Called with the GIL held, so a last release happens here.
void drop_released() {
  std::vector<c10::intrusive_ptr<DeviceWork>> released;
  {
    std::lock_guard<std::mutex> lock(kept_mutex);
    auto still_held = std::partition(kept.begin(), kept.end(), [](const auto& w) { return !w->released_by_gloo(); });
    released.assign(std::make_move_iterator(still_held), std::make_move_iterator(kept.end()));
    kept.erase(still_held, kept.end());
  }
}  // `released` goes here, outside the lock: a tensor's release may run Python

// Wait (without the GIL, so gloo's threads can take it) until gloo has let go of every kept work,
// at most `timeout_s`; then drop them here. False if some were still held (e.g. queued behind a
// collective a dead peer never joins): those stay kept.
bool settle(double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool all_released = false;
  {
    py::gil_scoped_release no_gil;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(kept_mutex);
        all_released = std::all_of(kept.begin(), kept.end(), [](const auto& w) { return w->released_by_gloo(); });
      }
      if (all_released || std::chrono::steady_clock::now() >= deadline) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  drop_released();
  return all_released;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> device_work(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> hosts,
                                           AliasMap aliases, std::string op, std::string group, int group_rank,
                                           std::function<void()> finish) {
  c10::intrusive_ptr<c10::ivalue::Future> gloo_future;
  try {
    gloo_future = work->getFuture();
  } catch (const c10::Error&) {
    if (!finish) {
      return work;
    }
    return c10::make_intrusive<FinishedOnWait>(std::move(work), std::move(finish));
  }
  // The callback owns the host aliases until gloo has finished with them.
  auto future = gloo_future->then(
      [aliases = std::move(aliases), hosts = std::move(hosts), op = std::move(op), group = std::move(group),
       group_rank, finish = std::move(finish)](c10::ivalue::Future& done) -> c10::IValue {
        if (done.hasError()) {
          C10_THROW_ERROR(DistBackendError, explain(op, group, group_rank, done.exception_ptr()));
        }
        if (finish) {
          finish();
        }
        return to_device(done.value(), aliases);
      },
      gloo_future->elementType());
  auto wrapped = c10::make_intrusive<DeviceWork>(std::move(work), std::move(future));
  drop_released();
  {
    std::lock_guard<std::mutex> lock(kept_mutex);
    kept.push_back(wrapped);
  }
  return wrapped;
}

}  // namespace torchplug_distributed

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "torchplug.distributed: the C++ route of collectives on torchplug's devices, and its Work";
  m.def("settle", &torchplug_distributed::settle, py::arg("timeout_s"),
        "Wait until gloo's worker threads have let go of every device work (at most timeout_s), then drop them. "
        "False if some were still held.");
  m.def("kept", [] {
    std::lock_guard<std::mutex> lock(torchplug_distributed::kept_mutex);
    return torchplug_distributed::kept.size();
  }, "How many device works are kept until gloo lets go of them.");
  m.def("route_through_host", &torchplug_distributed::route_through_host, py::arg("op"), py::arg("device_type"),
        py::arg("dispatch_key"), py::arg("staged"),
        "Register the C++ route as c10d::op's kernel for the device's key (staged: through host copies).");
  m.def("register_host_timer", &torchplug_distributed::register_host_timer, py::arg("device_type"),
        "Give DDP a host-clock iteration timer for the device type, unless torch has a timer for it.");
}
