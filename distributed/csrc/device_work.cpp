// A c10d Work for a collective that gloo runs on host aliases of emulated device tensors.
//
// It waits on gloo's own Work, so wait() honours timeouts, and raises gloo's failures as
// torch.distributed.DistBackendError with the rank that caused them named (peers.explain). Its
// future (made in host_route.py) holds the caller's device tensors, not their host aliases.
// torch's own future-wrapping Work cannot stand in for it: its wait() returns normally when the
// future failed, which would turn a dead peer into a silently wrong result.
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <chrono>
#include <exception>
#include <string>
#include <utility>

namespace {

class DeviceWork : public c10d::Work {
 public:
  DeviceWork(c10::intrusive_ptr<c10d::Work> gloo, c10::intrusive_ptr<c10::ivalue::Future> future, std::string op,
             std::string group, int group_rank)
      : c10d::Work(-1, gloo->retrieveOpType()),
        gloo_(std::move(gloo)),
        future_(std::move(future)),
        op_(std::move(op)),
        group_(std::move(group)),
        group_rank_(group_rank) {}

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

  void synchronize() override {}  // host memory: nothing to order against

  bool wait(std::chrono::milliseconds timeout) override {
    try {
      gloo_->wait(timeout);
    } catch (const std::exception& err) {
      if (!gloo_->isCompleted()) {
        throw;  // the wait itself timed out; the collective may still finish
      }
      C10_THROW_ERROR(DistBackendError, explain(err));
    }
    future_->wait();  // its callback has mapped gloo's result to the device tensors
    return true;
  }

  void abort() override {
    gloo_->abort();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> gloo_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::string op_;
  std::string group_;
  int group_rank_;

  std::string explain(const std::exception& err) const {
    const auto* error = dynamic_cast<const c10::Error*>(&err);
    std::string cause = error ? error->what_without_backtrace() : err.what();
    py::gil_scoped_acquire gil;
    return py::module_::import("torchplug.distributed.peers").attr("explain")(op_, group_, group_rank_, cause)
        .cast<std::string>();
  }
};

py::object device_work(const py::object& boxed_work, const py::object& future, std::string op, std::string group,
                       int group_rank) {
  auto work = torch::jit::toIValue(boxed_work, c10::getCustomClassType<c10::intrusive_ptr<c10d::Work>>())
                  .toCustomClass<c10d::Work>();
  auto fut = torch::jit::toIValue(future, c10::FutureType::create(c10::AnyType::get())).toFuture();
  // Boxed as torch's Work class: DeviceWork itself is not a registered custom class.
  c10::intrusive_ptr<c10d::Work> wrapped = c10::make_intrusive<DeviceWork>(
      std::move(work), std::move(fut), std::move(op), std::move(group), group_rank);
  return torch::jit::toPyObject(c10::IValue(std::move(wrapped)));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "torchplug.distributed: the Work of collectives on emulated devices";
  m.def("device_work", &device_work, py::arg("work"), py::arg("future"), py::arg("op"), py::arg("group"),
        py::arg("group_rank"),
        "A boxed c10d Work that waits on `work` (gloo's), explains its failures and completes with `future`.");
}
