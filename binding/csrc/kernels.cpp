// The kernels every device needs before any of its own: allocation (empty, empty_strided, resize_,
// set_), copies between the host and the device and on the device (all through the runtime's
// copies), and the view ops (metadata only, so device memory is never touched). Every other op
// without a kernel goes to torchplug's governed CPU fallback (torchplug.dispatcher), whose staging
// copies come back here.
#include "binding.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>

namespace torchplug::binding {
namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

bool on_device(const at::Tensor& tensor) { return tensor.device().type() == kType; }

// The bytes of its storage a tensor can reach: [first, end).
struct Extent {
  size_t first;
  size_t end;
};

Extent extent(const at::Tensor& tensor) {
  const size_t item = tensor.dtype().itemsize();
  const size_t first = static_cast<size_t>(tensor.storage_offset()) * item;
  if (tensor.numel() == 0) return {first, first};
  return {first, at::detail::computeStorageNbytes(tensor.sizes(), tensor.strides(), item, tensor.storage_offset())};
}

char* device_bytes(const at::Tensor& tensor) { return static_cast<char*>(tensor.storage().mutable_data()); }

// A CPU tensor holding a copy of what the device tensor `tensor` views, with its sizes and strides.
at::Tensor to_host(const at::Tensor& tensor) {
  const Extent bytes = extent(tensor);
  at::Tensor buffer = at::empty({static_cast<int64_t>(bytes.end - bytes.first)}, at::TensorOptions().dtype(at::kByte));
  copy(buffer.data_ptr(), device_bytes(tensor) + bytes.first, bytes.end - bytes.first, TORCHPLUG_DEVICE_TO_HOST,
       tensor.device().index());
  return at::empty({0}, tensor.options().device(at::kCPU))
      .set_(buffer.storage(), 0, tensor.sizes(), tensor.strides());
}

// Writes `host` (made by to_host(tensor), then changed) back over the bytes `tensor` views.
void write_back(const at::Tensor& tensor, const at::Tensor& host) {
  const Extent bytes = extent(tensor);
  copy(device_bytes(tensor) + bytes.first, host.storage().data(), bytes.end - bytes.first, TORCHPLUG_HOST_TO_DEVICE,
       tensor.device().index());
}

bool plain(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous() &&
         !a.is_conj() && !b.is_conj() && !a.is_neg() && !b.is_neg();
}

// Plain copies are queued on the current stream of the device involved, as CUDA's are: one on the
// device, or between the device and pinned host memory with non_blocking=True, returns at once.
at::Tensor copy_from(const at::Tensor& source, const at::Tensor& destination, bool non_blocking) {
  if (destination.numel() == 0) return destination;
  const size_t nbytes = destination.numel() * destination.dtype().itemsize();
  if (on_device(source) && on_device(destination)) {
    if (plain(source, destination) && source.device() == destination.device()) {
      copy(destination.data_ptr(), source.data_ptr(), nbytes, TORCHPLUG_DEVICE_TO_DEVICE, destination.device().index(),
           /*wait=*/false);
      return destination;
    }
    at::Tensor host = to_host(destination);
    host.copy_(to_host(source));
    write_back(destination, host);
  } else if (on_device(destination)) {  // host -> device
    if (plain(source, destination)) {
      copy(destination.data_ptr(), source.data_ptr(), nbytes, TORCHPLUG_HOST_TO_DEVICE, destination.device().index(),
           /*wait=*/!(non_blocking && is_pinned(source.data_ptr())));
      return destination;
    }
    at::Tensor host = to_host(destination);
    host.copy_(source);
    write_back(destination, host);
  } else {  // device -> host
    if (plain(source, destination)) {
      copy(destination.data_ptr(), source.data_ptr(), nbytes, TORCHPLUG_DEVICE_TO_HOST, source.device().index(),
           /*wait=*/!(non_blocking && is_pinned(destination.data_ptr())));
      return destination;
    }
    destination.copy_(to_host(source));
  }
  return destination;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> /*layout*/, std::optional<c10::Device> device,
                               std::optional<bool> /*pin_memory*/, std::optional<c10::MemoryFormat> format) {
  check_dtype(c10::dtype_or_default(dtype));
  const c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, device_allocator(), kKeys, c10::dtype_or_default(dtype), format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> /*layout*/, std::optional<c10::Device> device,
                         std::optional<bool> /*pin_memory*/) {
  check_dtype(c10::dtype_or_default(dtype));
  const c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kKeys, c10::dtype_or_default(dtype));
}

void grow_storage(const at::Tensor& tensor) {
  const size_t needed = extent(tensor).end;
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (needed > storage->nbytes()) resize_storage_bytes(storage, needed);
}

// The fallback's way back for an out= argument: an empty one takes the CPU result's strides, as the
// CPU kernel's own resize would have given it (abs of a column-major tensor stays column-major).
at::Tensor copy_from_and_resize(const at::Tensor& source, const at::Tensor& destination) {
  if (destination.numel() == 0 && source.is_non_overlapping_and_dense()) {
    destination.unsafeGetTensorImpl()->set_sizes_and_strides(source.sizes(), source.strides());
    grow_storage(destination);
  } else if (destination.sizes() != source.sizes()) {
    destination.resize_(source.sizes());
  }
  return copy_from(source, destination, false);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (self.sizes() == size && !format.has_value()) return self;
  impl->set_sizes_contiguous(size);
  if (format.has_value() && *format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(*format);
  grow_storage(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (!self.storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(offset);
  } else {
    impl->set_sizes_and_strides(size, stride, offset);
  }
  grow_storage(self);
  return self;
}

at::Tensor& set_whole_storage(at::Tensor& self, c10::Storage source) {
  const int64_t count = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {count}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

// A new device's convolutions reach convolution_overrideable, which has no CPU kernel for the
// fallback to run: they run as torch's convolution on staged CPU copies instead.
at::Tensor device_result(const at::Tensor& host, const at::Tensor& like) {
  return host.defined() ? host.to(like.device()) : host;
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> host_bias;
  if (bias.has_value() && bias->defined()) host_bias = bias->cpu();
  return device_result(at::convolution(input.cpu(), weight.cpu(), host_bias, stride, padding, dilation, transposed,
                                       output_padding, groups),
                       input);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const std::vector<int64_t> bias_sizes{weight.size(transposed ? 1 : 0) * (transposed ? groups : 1)};
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      grad_output.cpu(), input.cpu(), weight.cpu(), bias_sizes, stride, padding, dilation, transposed, output_padding,
      groups, output_mask);
  return {device_result(grad_input, input), device_result(grad_weight, input), device_result(grad_bias, input)};
}

}  // namespace

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "torchplug: trying to resize a storage that is not resizable");
  c10::DataPtr fresh = device_allocator()->allocate(nbytes);
  const size_t kept = std::min(nbytes, storage->nbytes());
  if (kept != 0) copy(fresh.get(), storage->data(), kept, TORCHPLUG_DEVICE_TO_DEVICE, fresh.device().index());
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

void register_kernels() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  library.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  library.impl("empty_strided", TORCH_FN(empty_strided));
  library.impl("_copy_from", TORCH_FN(copy_from));
  library.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  library.impl("resize_", TORCH_FN(resize));
  library.impl("set_.source_Storage", TORCH_FN(set_whole_storage));
  library.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  library.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  library.impl("set_", TORCH_FN(set_empty));
  // Views share the device storage; only their metadata is computed, on the host.
  library.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  library.impl("view", TORCH_FN(at::native::view));
  library.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  library.impl("unfold", TORCH_FN(at::native::unfold));
  library.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  library.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  library.impl("convolution_overrideable", TORCH_FN(convolution));
  library.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
}

}  // namespace torchplug::binding
