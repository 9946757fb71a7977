// The boxed fallback that runs every ATen op on an emulated device through the op's CPU kernel.
//
// Device memory is host memory, so nothing is copied: each device tensor is presented to the CPU
// kernel as a CPU tensor over the same bytes (a "host alias"), and the kernel's results are mapped
// back. In-place results and views keep aliasing the caller's device tensors; fresh results were
// allocated while the kernel ran with `ChargeTo(device)` in effect, so their blocks are already
// charged to the device and only need their DataPtr retagged. A backend replaces any op by
// registering a kernel for it under the device's dispatch key: per-op kernels win over a fallback.
#include "device_types.h"
#include "emulation.h"
#include "registration.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace torchplug::emulation {

c10::DispatchKey dispatch_key(c10::DeviceType type) { return emulated_type(type).key; }

namespace {

// Ops that legitimately take tensors from several devices, as they do on real accelerators.
enum class Mixing { kNone, kCpuIndices, kAnyDevice };

Mixing mixing_allowed(const c10::OperatorHandle& op) {
  const std::string& name = op.operator_name().name;
  if (name == "aten::copy_" || name == "aten::copy" || name == "aten::_copy_from" ||
      name == "aten::_copy_from_and_resize" || name == "aten::_foreach_copy_") {
    return Mixing::kAnyDevice;
  }
  if (name == "aten::index" || name == "aten::index_put_" || name == "aten::index_put" ||
      name == "aten::_index_put_impl_" || name == "aten::_unsafe_index" || name == "aten::_unsafe_index_put") {
    return Mixing::kCpuIndices;  // CUDA accepts CPU index tensors too
  }
  return Mixing::kNone;
}

// An argument the op writes to: self of an in-place op, or an out= tensor.
bool is_written(const c10::Argument& argument) {
  const c10::AliasInfo* alias = argument.alias_info();
  return alias != nullptr && alias->isWrite();
}

bool is_optional_generator(const c10::Argument& argument) {
  const auto& type = argument.type();
  if (type->kind() != c10::TypeKind::OptionalType) {
    return false;
  }
  return type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

bool is_dtype_argument(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.real_type();
  if (type->kind() == c10::TypeKind::ScalarTypeType) {
    return true;
  }
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::ScalarTypeType;
}

// An efficient zero tensor (torch._efficientzerotensor: no memory behind it) keeps its ZeroTensor
// key on either side; the key can only be given when the TensorImpl is made.
c10::DispatchKeySet with_zero_bit(c10::DispatchKey backend, const c10::TensorImpl* like) {
  c10::DispatchKeySet keys(backend);
  return like->_is_zerotensor() ? keys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor) : keys;
}

struct TensorAlias {
  at::Tensor device;
  at::Tensor host;
  c10::StorageImpl* host_storage;
};

struct StorageAlias {
  c10::Storage device;
  c10::Storage host;
  void* data;
  size_t nbytes;
};

struct FreshStorage {
  c10::StorageImpl* host;
  c10::Storage device;
};

// A contiguous host tensor the CPU kernel writes instead of a non-contiguous device tensor's alias.
struct Proxy {
  at::Tensor device;
  at::Tensor alias;  // the host alias of `device`, with its strides
  at::Tensor proxy;
  c10::StorageImpl* proxy_storage;
};

// The work of one fallback call: check devices, alias inputs, run the CPU kernel, map back.
class HostCall {
 public:
  HostCall(const c10::OperatorHandle& op, torch::jit::Stack* stack)
      : op_(op), schema_(op.schema()), stack_(stack), nargs_(schema_.arguments().size()) {}

  void run() {
    inspect();
    if (restricted_) {
      check_dtypes();
    }
    rewrite();
    {
      ChargeTo charge(target_.value_or(c10::Device(c10::DeviceType::CPU)));
      try {
        op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack_);
      } catch (const c10::NotImplementedError& err) {
        // Only the dispatcher's "Could not run" means a missing kernel; a CPU kernel refusing a dtype
        // ('"histogram_cpu" not implemented for 'Long'') raises the same type and goes on unchanged,
        // as it does on the CPU.
        if (std::string(err.what_without_backtrace()).find("Could not run") == std::string::npos) {
          throw;
        }
        TORCH_CHECK_NOT_IMPLEMENTED(
            false, op_.operator_name(), " has no CPU kernel, so torchplug's emulated ",
            target_ ? target_->str() : std::string("device"),
            " cannot run it. Register a kernel for it under the device's dispatch key. CPU error: ",
            err.what_without_backtrace());
      }
    }
    settle_proxies();
    write_back();
    map_outputs();
  }

 private:
  // ---- before the kernel -------------------------------------------------------------------
  void inspect() {
    auto args = stack_->end() - static_cast<std::ptrdiff_t>(nargs_);
    for (size_t i = 0; i < nargs_; ++i) {
      const c10::IValue& v = args[i];
      const bool written = is_written(schema_.arguments()[i]);
      if (v.isTensor()) {
        inspect_tensor(v.toTensor(), i, written);
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList()) {
          inspect_tensor(t, i, written);
        }
      } else if (v.isList()) {
        for (const c10::IValue& e : v.toListRef()) {
          if (e.isTensor()) {
            inspect_tensor(e.toTensor(), i, written);
          }
        }
      } else if (v.isStorage()) {
        const c10::Storage& s = v.toStorage();
        if (is_emulated(s.device().type())) {
          note_device(s.device(), i);
        } else {
          note_host(i, s.device());
        }
      } else if (v.isDevice() && is_emulated(v.toDevice().type())) {
        factory_device_ = resolve(v.toDevice());
      }
    }
    if (!target_ && factory_device_) {
      target_ = factory_device_;
    }
    if (target_ && host_output_arg_ >= 0 && mixing() != Mixing::kAnyDevice) {
      mismatch(static_cast<size_t>(host_output_arg_), c10::Device(c10::DeviceType::CPU));
    }
    if (target_ && host_arg_ >= 0) {
      const Mixing m = mixing();
      if (!(m == Mixing::kAnyDevice || (m == Mixing::kCpuIndices && host_device_.is_cpu()))) {
        mismatch(static_cast<size_t>(host_arg_), host_device_);
      }
    }
    restricted_ = target_ && state(target_->type()).dtype_mask != ~0ull;
  }

  void inspect_tensor(const at::Tensor& t, size_t arg, bool written) {
    if (!t.defined()) {
      return;
    }
    const c10::Device d = t.device();
    if (is_emulated(d.type())) {
      note_device(d, arg);
    } else if (d.is_cpu()) {
      // Owning: the stack may hold the only reference (a conj-resolved copy, for one), and the
      // kernel pops it before the outputs are mapped.
      host_inputs_.push_back(t);
      if (written) {  // the CPU-scalar exemption is for inputs: a GPU refuses a CPU out= or self
        if (host_output_arg_ < 0) {
          host_output_arg_ = static_cast<int64_t>(arg);
        }
      } else if (t.dim() != 0) {  // 0-dim CPU tensors are scalars, accepted next to device tensors
        note_host(arg, d);
      }
    } else {
      note_host(arg, d);
    }
  }

  void note_device(c10::Device d, size_t arg) {
    if (!target_) {
      target_ = d;
    } else if (d != *target_ && mixing() != Mixing::kAnyDevice) {
      mismatch(arg, d);
    }
  }

  // Remembers the first host (or foreign-device) tensor; whether it is an error depends on the op.
  void note_host(size_t arg, c10::Device d) {
    if (host_arg_ < 0 || (!d.is_cpu() && host_device_.is_cpu())) {
      host_arg_ = static_cast<int64_t>(arg);
      host_device_ = d;
    }
  }

  Mixing mixing() {
    if (!mixing_) {
      mixing_ = mixing_allowed(op_);
    }
    return *mixing_;
  }

  [[noreturn]] void mismatch(size_t arg, c10::Device found) {
    TORCH_CHECK(
        false, "Expected all tensors to be on the same device, but got ", schema_.arguments()[arg].name(),
        " is on ", found, ", different from other tensors on ", *target_, " (when checking arguments for ",
        op_.operator_name(), " on torchplug's emulated ", target_->type(), " runtime)");
  }

  // Only for device types whose backend leaves out some dtypes (emulated MPS: no float64).
  void check_dtypes() {
    auto args = stack_->end() - static_cast<std::ptrdiff_t>(nargs_);
    for (size_t i = 0; i < nargs_; ++i) {
      const c10::IValue& v = args[i];
      if (v.isTensor()) {
        check_tensor_dtype(v.toTensor());
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList()) {
          check_tensor_dtype(t);
        }
      } else if (v.isInt() && is_dtype_argument(schema_.arguments()[i])) {
        check_scalar_type(target_->type(), static_cast<c10::ScalarType>(v.toInt()));
      }
    }
  }

  void check_tensor_dtype(const at::Tensor& t) {
    if (t.defined() && is_emulated(t.device().type())) {
      check_scalar_type(t.device().type(), t.scalar_type());
    }
  }

  void check_scalar_type(c10::DeviceType type, c10::ScalarType dtype) {
    if (!dtype_allowed(type, dtype)) {  // the op's name is formatted only for the error
      check_dtype(type, dtype, c10::toString(op_.operator_name()));
    }
  }

  template <class Fn>
  static c10::List<at::Tensor> mapped(const c10::List<at::Tensor>& list, Fn&& fn) {
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) {
      out.push_back(fn(t));
    }
    return out;
  }

  void rewrite() {
    auto args = stack_->end() - static_cast<std::ptrdiff_t>(nargs_);
    for (size_t i = 0; i < nargs_; ++i) {
      c10::IValue& v = args[i];
      if (v.isTensor()) {
        if (on_device(v.toTensor())) {
          v = needs_proxy(i, v.toTensor()) ? proxy_tensor(v.toTensor()) : host_tensor(v.toTensor());
        }
      } else if (v.isTensorList()) {
        v = mapped(v.toTensorList(), [this](const at::Tensor& t) { return on_device(t) ? host_tensor(t) : t; });
      } else if (v.isList()) {
        c10::List<c10::IValue> list = v.toList();
        for (size_t j = 0; j < list.size(); ++j) {
          c10::IValue e = list.get(j);
          if (e.isTensor() && on_device(e.toTensor())) {
            list.set(j, host_tensor(e.toTensor()));
          }
        }
      } else if (v.isStorage()) {
        if (is_emulated(v.toStorage().device().type())) {
          v = host_storage(v.toStorage());
        }
      } else if (v.isDevice()) {
        if (is_emulated(v.toDevice().type())) {
          v = c10::Device(c10::DeviceType::CPU);
        }
      } else if (v.isGenerator()) {
        if (is_emulated(v.toGenerator().device().type())) {
          v = host_generator(v.toGenerator());  // CPU kernels sample only from CPU generators
        }
      } else if (v.isNone() && target_ && is_optional_generator(schema_.arguments()[i])) {
        // Sample from the device's own generator, not the CPU's default one.
        auto* impl = static_cast<c10::GeneratorImpl*>(generator_impl(*target_));
        v = at::Generator(c10::intrusive_ptr<c10::GeneratorImpl>::unsafe_reclaim_from_nonowning(impl));
      }
    }
  }

  static bool on_device(const at::Tensor& t) {
    return t.defined() && is_emulated(t.device().type());
  }

  // A GPU writes an out= tensor by its strides, and draws the same random numbers into a strided view
  // as into a fresh tensor. Some CPU kernels do neither: legacy out= kernels write a non-contiguous
  // out as if it were contiguous (avg_pool3d), and the CPU's normal sampler fills a contiguous tensor
  // in blocks but a strided one element by element. So the kernel writes such a tensor through a
  // contiguous copy, as torch's structured kernels do for themselves (their out= proxies), and the
  // values are copied back.
  bool needs_proxy(size_t arg, const at::Tensor& t) {
    const c10::Argument& argument = schema_.arguments()[arg];
    if (!is_written(argument) || t.is_contiguous() || already_aliased(t)) {
      return false;
    }
    return argument.kwarg_only() || op_.hasTag(at::Tag::nondeterministic_seeded);
  }

  bool already_aliased(const at::Tensor& t) const {
    for (const TensorAlias& a : tensors_) {
      if (a.device.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        return true;
      }
    }
    return false;
  }

  at::Tensor proxy_tensor(const at::Tensor& t) {
    at::Tensor alias = host_tensor(t);
    at::Tensor proxy = alias.clone(at::MemoryFormat::Contiguous);  // in-place ops read what they write
    proxies_.push_back({t, alias, proxy, proxy.storage().unsafeGetStorageImpl()});
    return proxy;
  }

  at::Tensor host_tensor(const at::Tensor& t) {
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    for (const TensorAlias& a : tensors_) {
      if (a.device.unsafeGetTensorImpl() == impl) {
        return a.host;
      }
    }
    c10::Storage storage = host_storage(t.storage());
    c10::StorageImpl* storage_impl = storage.unsafeGetStorageImpl();
    auto host = c10::make_intrusive<c10::TensorImpl>(
        std::move(storage), with_zero_bit(c10::DispatchKey::CPU, impl), t.dtype());
    host->set_sizes_and_strides(impl->sizes(), impl->strides(), impl->storage_offset());
    host->_set_conj(impl->is_conj());
    host->_set_neg(impl->is_neg());
    at::Tensor result(std::move(host));
    tensors_.push_back({t, result, storage_impl});
    return result;
  }

  c10::Storage host_storage(const c10::Storage& s) {
    c10::StorageImpl* impl = s.unsafeGetStorageImpl();
    for (const StorageAlias& a : storages_) {
      if (a.device.unsafeGetStorageImpl() == impl) {
        return a.host;
      }
    }
    void* data = impl->data_ptr().get();
    // Non-owning: the device storage keeps the memory alive for the duration of the call.
    c10::Storage host(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), impl->sym_nbytes(),
        c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)), host_allocator(), impl->resizable()));
    storages_.push_back({s, host, data, impl->nbytes()});
    return host;
  }

  // ---- after the kernel --------------------------------------------------------------------
  // A proxy the kernel left in shape is copied into the caller's tensor by its strides; one the kernel
  // resized (an out= of the wrong shape) replaces the caller's storage, as the resize would have.
  void settle_proxies() {
    for (const Proxy& p : proxies_) {
      const bool resized = p.proxy.storage().unsafeGetStorageImpl() != p.proxy_storage || p.proxy.sizes() != p.alias.sizes();
      if (!resized) {
        p.alias.copy_(p.proxy);
        continue;
      }
      for (TensorAlias& a : tensors_) {
        if (a.device.unsafeGetTensorImpl() == p.device.unsafeGetTensorImpl()) {
          a.host = p.proxy;  // write_back moves the proxy's storage and shape to the device tensor
        }
      }
    }
  }

  // In-place ops on metadata (resize_, set_, transpose_, as_strided_, ...) changed the aliases;
  // carry their effect over to the caller's device tensors and storages.
  void write_back() {
    for (StorageAlias& a : storages_) {
      c10::StorageImpl* host = a.host.unsafeGetStorageImpl();
      void* data = host->data_ptr().get();
      if (data == a.data && host->nbytes() == a.nbytes) {
        continue;
      }
      c10::Device device = a.device.device();
      c10::DataPtr owned = host->set_data_ptr(c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)));
      c10::StorageImpl* target = a.device.unsafeGetStorageImpl();
      target->set_data_ptr_noswap(to_device_block(std::move(owned), host->nbytes(), device));
      target->set_nbytes(host->nbytes());
    }
    for (TensorAlias& a : tensors_) {
      c10::TensorImpl* host = a.host.unsafeGetTensorImpl();
      c10::TensorImpl* device = a.device.unsafeGetTensorImpl();
      if (host->storage().unsafeGetStorageImpl() != a.host_storage) {
        device->set_storage_keep_dtype(device_storage(host->storage(), a.device.device()));
      }
      if (host->storage_offset() != device->storage_offset() || host->sizes() != device->sizes() ||
          host->strides() != device->strides()) {
        device->set_sizes_and_strides(host->sizes(), host->strides(), host->storage_offset());
      }
      // A kernel may conjugate or negate an argument lazily, by its bit: linalg_lu_solve.out with
      // left=False sets out='s conj bit instead of conjugating its values.
      device->_set_conj(host->is_conj());
      device->_set_neg(host->is_neg());
    }
  }

  void map_outputs() {
    const size_t nreturns = schema_.returns().size();
    auto outs = stack_->end() - static_cast<std::ptrdiff_t>(nreturns);
    for (size_t i = 0; i < nreturns; ++i) {
      c10::IValue& v = outs[i];
      if (v.isTensor()) {
        v = device_tensor(v.toTensor());
      } else if (v.isTensorList()) {
        v = mapped(v.toTensorList(), [this](const at::Tensor& t) { return device_tensor(t); });
      }
    }
  }

  at::Tensor device_tensor(const at::Tensor& host) {
    if (!host.defined() || !host.device().is_cpu()) {
      return host;
    }
    c10::TensorImpl* impl = host.unsafeGetTensorImpl();
    for (const Proxy& p : proxies_) {
      if (p.proxy.unsafeGetTensorImpl() == impl) {
        return p.device;
      }
    }
    for (const TensorAlias& a : tensors_) {
      if (a.host.unsafeGetTensorImpl() == impl) {
        return a.device;  // in-place and out= results are the caller's own tensors
      }
    }
    if (!target_ || is_host_input(host)) {
      return host;  // e.g. copy_ into a CPU tensor returns that CPU tensor
    }
    TORCH_CHECK_NOT_IMPLEMENTED(
        host.layout() == c10::kStrided && impl->has_storage(), op_.operator_name(), " would return a ",
        host.layout(), " tensor on ", *target_, ", but torchplug's emulated devices hold strided tensors only ",
        "(docs/emulation.md, 'Other limits'). Work on the CPU instead, e.g. x.cpu().to_sparse()");
    c10::Storage storage = device_storage(host.storage(), *target_);
    const c10::DispatchKey key = dispatch_key(storage.device().type());
    auto device = c10::make_intrusive<c10::TensorImpl>(std::move(storage), with_zero_bit(key, impl), host.dtype());
    device->set_sizes_and_strides(impl->sizes(), impl->strides(), impl->storage_offset());
    device->_set_conj(impl->is_conj());  // a conj/neg view stays one on the device
    device->_set_neg(impl->is_neg());
    if (restricted_) {
      check_scalar_type(target_->type(), host.scalar_type());
    }
    return at::Tensor(std::move(device));
  }

  bool is_host_input(const at::Tensor& t) const {
    const c10::StorageImpl* storage = t.unsafeGetTensorImpl()->has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
    for (const at::Tensor& held : host_inputs_) {
      const c10::TensorImpl* input = held.unsafeGetTensorImpl();
      if (input == t.unsafeGetTensorImpl() || (storage && input->has_storage() && input->storage().unsafeGetStorageImpl() == storage)) {
        return true;
      }
    }
    return false;
  }

  // The device storage behind a host storage the kernel returned: an input's own storage, or a
  // fresh one that becomes device memory in place (same StorageImpl, retagged DataPtr).
  c10::Storage device_storage(const c10::Storage& host, c10::Device device) {
    c10::StorageImpl* impl = host.unsafeGetStorageImpl();
    for (const StorageAlias& a : storages_) {
      if (a.host.unsafeGetStorageImpl() == impl) {
        return a.device;
      }
    }
    for (const FreshStorage& f : fresh_) {
      if (f.host == impl) {
        return f.device;
      }
    }
    c10::Storage result;
    if (adopt_block(impl->mutable_data_ptr(), device)) {
      impl->set_allocator(device_allocator(device.type()));
      result = host;
    } else {
      // Memory the kernel got elsewhere (a cached or foreign buffer): the one case that copies.
      result = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), impl->nbytes(), copy_block(impl->data_ptr().get(), impl->nbytes(), device),
          device_allocator(device.type()), /*resizable=*/true));
    }
    fresh_.push_back({impl, result});
    return result;
  }

  static c10::DataPtr to_device_block(c10::DataPtr block, size_t nbytes, c10::Device device) {
    if (adopt_block(block, device)) {
      return block;
    }
    return copy_block(block.get(), nbytes, device);
  }

  static c10::DataPtr copy_block(const void* data, size_t nbytes, c10::Device device) {
    c10::DataPtr block = allocate_block(nbytes, device, device);
    check_runtime(host_runtime(device.type()).memcpy(block.get(), data, nbytes, TORCHPLUG_HOST_TO_DEVICE));
    return block;
  }

  const c10::OperatorHandle& op_;
  const c10::FunctionSchema& schema_;
  torch::jit::Stack* stack_;
  size_t nargs_;
  std::optional<c10::Device> target_;
  std::optional<c10::Device> factory_device_;
  std::optional<Mixing> mixing_;
  int64_t host_arg_ = -1;
  int64_t host_output_arg_ = -1;  // a CPU tensor the op writes to
  c10::Device host_device_{c10::DeviceType::CPU};
  bool restricted_ = false;
  c10::SmallVector<TensorAlias, 4> tensors_;
  c10::SmallVector<StorageAlias, 4> storages_;
  c10::SmallVector<FreshStorage, 2> fresh_;
  c10::SmallVector<Proxy, 1> proxies_;
  c10::SmallVector<at::Tensor, 2> host_inputs_;
};

// Streams are synchronous here, so there is nothing to record.
void ignore_record_stream(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  torch::jit::drop(*stack, 2);
}

}  // namespace

void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  note_dispatch(op);
  if (pool_routing_active()) {
    graph_check_host_read(op, *stack);  // a graph capture refuses .item() (graphs.cpp)
  }
  HostCall(op, stack).run();
}

torch::Library& kept_library(torch::Library::Kind kind, const char* ns, c10::DispatchKey key, const char* file,
                             uint32_t line) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  std::lock_guard<std::mutex> lock(mutex);
  libraries.push_back(std::make_unique<torch::Library>(kind, ns, key, file, line));
  return *libraries.back();
}

void register_fallback(c10::DeviceType type) {
  const c10::DispatchKey key = dispatch_key(type);
  kept_library(torch::Library::IMPL, "_", key, __FILE__, __LINE__)
      .fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  kept_library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__)
      .impl("record_stream", torch::CppFunction::makeFromBoxedFunction<&ignore_record_stream>());
}

}  // namespace torchplug::emulation
