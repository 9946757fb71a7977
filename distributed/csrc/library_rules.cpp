// The rules of the collective library an emulated device stands in for (NCCL on cuda, RCCL on
// rocm, which torch also calls "nccl"; XCCL on xpu), applied before gloo runs a collective.
//
// gloo and these libraries accept different calls. The libraries judge the tensor collectives by
// element count (a flat or a stacked all_gather_into_tensor output works for an input of any
// shape; gloo wants [world * dim0, ...]), take AVG and PREMUL_SUM, and move fp8 tensors; they
// refuse bitwise reductions, dtypes outside their table and non-contiguous tensors, with errors of
// their own. A group that serves an emulated device under the library's name (or torchplug's)
// follows them; a group the user made with "gloo" keeps gloo's, as on a real GPU.
//
// The rules only rewrite the call that reaches gloo, on host aliases: tensors viewed flat, fp8
// moved as bytes, reductions gloo lacks staged in a buffer gloo can reduce (scaled by the
// PREMUL_SUM/AVG factor, fp8 widened to float) and written back when gloo's work completes.
#include "collectives.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace torchplug_distributed {
namespace {

// Groups whose collectives on an emulated device type follow a library's rules.
struct Follower {
  c10::weak_intrusive_ptr<c10d::ProcessGroup> group;
  c10::DeviceType type;
  std::string library;  // "nccl" or "xccl"
};
std::mutex followers_mutex;
std::vector<Follower> followers;

void follow_library_op(const c10::intrusive_ptr<c10d::ProcessGroup>& group, std::string device_type,
                       std::string library) {
  TORCH_CHECK_VALUE(library == "nccl" || library == "xccl", "no collective library rules for '", library, "'");
  std::lock_guard<std::mutex> lock(followers_mutex);
  followers.erase(std::remove_if(followers.begin(), followers.end(), [](const Follower& f) { return f.group.expired(); }),
                  followers.end());
  followers.push_back({c10::weak_intrusive_ptr<c10d::ProcessGroup>(group), c10::Device(device_type).type(),
                       std::move(library)});
}

TORCH_LIBRARY_FRAGMENT(torchplug_distributed, m) {
  m.def("follow_library(__torch__.torch.classes.c10d.ProcessGroup group, str device_type, str library) -> ()",
        &follow_library_op);
}

bool is_float8(at::ScalarType t) {
  return t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2 || t == at::kFloat8_e4m3fnuz || t == at::kFloat8_e5m2fnuz;
}

// The dtypes torch hands the library (ProcessGroupNCCL's and ProcessGroupXCCL's tables).
bool library_takes(at::ScalarType t) {
  switch (t) {
    case at::kChar: case at::kByte: case at::kInt: case at::kLong: case at::kHalf: case at::kFloat:
    case at::kDouble: case at::kBFloat16: case at::kBool:
      return true;
    default:
      return is_float8(t);
  }
}

// The dtypes gloo reduces (ProcessGroupGlooDetail.hpp's GENERATE_ALL_TYPES).
bool gloo_takes(at::ScalarType t) {
  return library_takes(t) && !is_float8(t);
}

bool is_reduction(const std::string& op) {
  static const std::set<std::string> reductions = {
      "c10d::allreduce_", "c10d::allreduce_coalesced_", "c10d::reduce_", "c10d::reduce_scatter_",
      "c10d::_reduce_scatter_base_", "c10d::reduce_scatter_tensor_coalesced_"};
  return reductions.count(op) > 0;
}

// The collectives the library runs on the tensors' own memory, which it therefore checks for
// contiguity (list collectives copy through a flat buffer; point-to-point only warns).
bool on_flat_memory(const std::string& op) {
  static const std::set<std::string> flat = {
      "c10d::allreduce_", "c10d::allreduce_coalesced_", "c10d::reduce_", "c10d::broadcast_",
      "c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "c10d::allgather_into_tensor_coalesced_",
      "c10d::reduce_scatter_tensor_coalesced_", "c10d::alltoall_base_"};
  return flat.count(op) > 0;
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), ::toupper);
  return text;
}

// A CPU tensor over `t`'s bytes (host memory: a host alias, or an emulated device's tensor) with
// another shape or a dtype of the same size.
at::Tensor view_of(const at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dtype) {
  return at::from_blob(t.data_ptr(), sizes, strides, t.options().dtype(dtype).device(at::kCPU));
}

class Call {
 public:
  Call(std::string library, std::string op, const c10::FunctionSchema& schema, torch::jit::Stack& stack,
       size_t first, int world_size, int rank, AliasMap& aliases, std::vector<at::Tensor>& hosts)
      : library_(std::move(library)), label_(upper(library_)), op_(std::move(op)), schema_(schema),
        stack_(stack), first_(first), world_size_(world_size), rank_(rank), aliases_(aliases), hosts_(hosts) {}

  std::function<void()> apply() {
    if (op_ == "c10d::barrier" || op_ == "c10d::monitored_barrier_") {
      return {};
    }
    const bool flat_memory = on_flat_memory(op_);
    bool any_float8 = false;
    visit_arguments([&](const at::Tensor& t) {
      check_tensor(t, flat_memory);
      any_float8 = any_float8 || is_float8(t.scalar_type());
    });
    if (op_ == "c10d::_allgather_base_" || op_ == "c10d::allgather_into_tensor_coalesced_") {
      pair_by_element_count(/*gather=*/true);
    } else if (op_ == "c10d::_reduce_scatter_base_" || op_ == "c10d::reduce_scatter_tensor_coalesced_") {
      pair_by_element_count(/*gather=*/false);
    }
    if (is_reduction(op_)) {
      reduce();
    } else if (any_float8) {  // data movement: fp8 travels as bytes, which gloo moves
      for_each_argument([&](const at::Tensor& t) {
        return is_float8(t.scalar_type()) ? alias(t, view_of(t, t.sizes(), t.strides(), at::kByte)) : t;
      });
    }
    if (write_back_.empty() && divide_.empty()) {
      return {};
    }
    return [write_back = std::move(write_back_), divide = std::move(divide_), world = world_size_] {
      for (const auto& [caller, staged] : write_back) {
        caller.copy_(staged);
      }
      for (const at::Tensor& output : divide) {
        output.div_(world, "trunc");  // NCCL's integer AVG: the sum divided, rounded toward zero
      }
    };
  }

 private:
  // Replace every tensor among the arguments by map(tensor).
  template <typename Map>
  void for_each_argument(const Map& map) {
    for (size_t i = first_; i < stack_.size(); ++i) {
      stack_[i] = map_tensors(stack_[i], map);
    }
  }

  // Every tensor in `value` (a tensor, a list, a list of lists), in order.
  template <typename Visit>
  static void walk(const c10::IValue& value, const Visit& visit) {
    if (value.isTensor()) {
      visit(value.toTensor());
    } else if (value.isList()) {
      for (const c10::IValue& element : value.toListRef()) {
        walk(element, visit);
      }
    }
  }

  template <typename Visit>
  void visit_arguments(const Visit& visit) const {
    for (size_t i = first_; i < stack_.size(); ++i) {
      walk(stack_[i], visit);
    }
  }

  c10::IValue& argument(const char* name) {
    return stack_[first_ + *schema_.argumentIndexWithName(name)];
  }

  // `replacement` stands for the caller's tensor that `host` aliases (results map back to it).
  at::Tensor alias(const at::Tensor& host, at::Tensor replacement) {
    aliases_.emplace(replacement.unsafeGetTensorImpl(), aliases_.at(host.unsafeGetTensorImpl()));
    hosts_.push_back(replacement);
    return replacement;
  }

  void check_tensor(const at::Tensor& t, bool on_flat_memory) const {
    TORCH_CHECK_TYPE(library_takes(t.scalar_type()), "Input tensor data type is not supported for ", label_,
                     " process group: ", t.scalar_type(), " (emulated ", label_, ", ", op_, ")");
    TORCH_CHECK_VALUE(!on_flat_memory || t.is_contiguous(t.suggest_memory_format()),
                      "Tensors must be contiguous (emulated ", label_, ", ", op_, ": a tensor of shape ", t.sizes(),
                      " and strides ", t.strides(), "; call .contiguous() first)");
  }

  // all_gather_into_tensor / reduce_scatter_tensor (and their coalesced forms): the library checks
  // dtypes and element counts only, then moves flat memory. gloo gets the same, as flat views.
  void pair_by_element_count(bool gather) {
    const char* outputs_name = op_.find("coalesced") != std::string::npos ? "outputs" : "output_tensor";
    const char* inputs_name = op_.find("coalesced") != std::string::npos ? "inputs" : "input_tensor";
    std::vector<at::Tensor> outputs = tensors_of(argument(outputs_name));
    std::vector<at::Tensor> inputs = tensors_of(argument(inputs_name));
    for (size_t i = 0; i < outputs.size() && i < inputs.size(); ++i) {
      const at::Tensor& out = outputs[i];
      const at::Tensor& in = inputs[i];
      if (gather) {
        TORCH_CHECK_TYPE(in.dtype() == out.dtype(), "output tensor must have the same type as input tensor (emulated ",
                         label_, ": ", out.scalar_type(), " output, ", in.scalar_type(), " input)");
        TORCH_CHECK_VALUE(in.numel() * world_size_ == out.numel(),
                          "output tensor size must be equal to world_size times input tensor size (emulated ", label_,
                          ": output of ", out.numel(), " elements, input of ", in.numel(), ", world size ",
                          world_size_, ")");
      } else {
        TORCH_CHECK_TYPE(in.dtype() == out.dtype(), "input tensor must be the same type as the output tensor. (emulated ",
                         label_, ": ", in.scalar_type(), " input, ", out.scalar_type(), " output)");
        TORCH_CHECK_VALUE(in.numel() == out.numel() * world_size_,
                          "input tensor must be the same size as output size times world size (emulated ", label_,
                          ": input of ", in.numel(), " elements, output of ", out.numel(), ", world size ",
                          world_size_, ")");
      }
    }
    for (const char* name : {outputs_name, inputs_name}) {
      argument(name) = map_tensors(argument(name), [&](const at::Tensor& t) {
        return alias(t, view_of(t, {t.numel()}, {1}, t.scalar_type()));
      });
    }
  }

  static std::vector<at::Tensor> tensors_of(const c10::IValue& value) {
    std::vector<at::Tensor> found;
    walk(value, [&](const at::Tensor& t) { found.push_back(t); });
    return found;
  }

  // The reduce op gloo can run for the library's, staging what gloo cannot reduce as it is.
  void reduce() {
    c10::IValue& op_argument = argument("reduce_op");
    const auto reduce_op = op_argument.toCustomClass<c10d::ReduceOp>();
    const c10d::ReduceOp::RedOpType kind = reduce_op->op_;
    std::set<at::ScalarType> dtypes;
    visit_arguments([&](const at::Tensor& t) { dtypes.insert(t.scalar_type()); });
    TORCH_CHECK_VALUE(kind != c10d::ReduceOp::BAND && kind != c10d::ReduceOp::BOR && kind != c10d::ReduceOp::BXOR,
                      "Cannot use ReduceOp.", kind == c10d::ReduceOp::BAND ? "BAND" : kind == c10d::ReduceOp::BOR ? "BOR" : "BXOR",
                      " with ", label_, " (emulated ", label_, ": gloo would take it, the library does not)");
    for (at::ScalarType dtype : dtypes) {
      TORCH_CHECK(!is_float8(dtype) || library_ != "xccl",
                  "Float8 dtypes are not currently supported for XCCL reductions (emulated XCCL)");
      TORCH_CHECK(!is_float8(dtype) || dtype == at::kFloat8_e4m3fn || dtype == at::kFloat8_e5m2,
                  "Unsupported Float8 type for NCCL reduction: ", dtype, " (emulated NCCL takes float8_e4m3fn and "
                  "float8_e5m2, as NCCL 2.24+ does)");
      TORCH_CHECK_TYPE(dtype != at::kBool || kind != c10d::ReduceOp::AVG, "Cannot use ReduceOp.AVG with boolean inputs");
    }
    const at::ScalarType dtype = *dtypes.begin();
    const bool gloo_as_is = (kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::PRODUCT ||
                             kind == c10d::ReduceOp::MIN || kind == c10d::ReduceOp::MAX) &&
        std::all_of(dtypes.begin(), dtypes.end(), [&](at::ScalarType t) {
          return gloo_takes(t) && !(t == at::kBool && kind == c10d::ReduceOp::SUM);
        });
    if (gloo_as_is) {
      return;
    }
    TORCH_CHECK_VALUE(dtypes.size() == 1, op_, " with tensors of dtypes ", c10::ArrayRef<at::ScalarType>(
                          std::vector<at::ScalarType>(dtypes.begin(), dtypes.end())),
                      ": emulated ", label_, " stages a reduction gloo lacks (AVG, PREMUL_SUM, fp8, a bool SUM) "
                      "for one dtype per call; split the call by dtype");
    if (dtype == at::kBool) {
      if (kind == c10d::ReduceOp::SUM) {  // as the library does: a bitwise or, never a byte of 2
        op_argument = c10::IValue(c10::make_intrusive<c10d::ReduceOp>(c10d::ReduceOp::MAX));
      }
      return;
    }
    const bool floating = at::isFloatingType(dtype) || is_float8(dtype);
    std::optional<double> factor;
    if (kind == c10d::ReduceOp::PREMUL_SUM) {
      TORCH_CHECK_TYPE(dtype == at::kHalf || dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kDouble,
                       "PreMulSum Data type must be half, float, bfloat16 or double (emulated ", label_, ", got ",
                       dtype, ")");
      factor = premul_factor(*reduce_op);
    } else if (kind == c10d::ReduceOp::AVG && floating) {
      factor = 1.0 / world_size_;  // NCCL averages floating types as a PREMUL_SUM by 1/world
    }
    if (kind == c10d::ReduceOp::AVG && !floating) {
      op_argument = c10::IValue(c10::make_intrusive<c10d::ReduceOp>(c10d::ReduceOp::SUM));
      for (const at::Tensor& output : written()) {
        divide_.push_back(output);
      }
      return;
    }
    if (factor) {
      op_argument = c10::IValue(c10::make_intrusive<c10d::ReduceOp>(c10d::ReduceOp::SUM));
    }
    stage(dtype, factor);
  }

  // The caller's tensors the reduction writes (host aliases); for reduce_, only the root's.
  std::vector<at::Tensor> written() {
    if (op_ == "c10d::reduce_") {
      return stack_[first_ + *schema_.argumentIndexWithName("root_rank")].toInt() == rank_
          ? tensors_of(argument("tensors")) : std::vector<at::Tensor>{};
    }
    if (op_ == "c10d::allreduce_" || op_ == "c10d::allreduce_coalesced_") {
      return tensors_of(argument("tensors"));
    }
    return tensors_of(argument(op_ == "c10d::reduce_scatter_" ? "output_tensors"
                               : op_ == "c10d::_reduce_scatter_base_" ? "output_tensor" : "outputs"));
  }

  static double premul_factor(const c10d::ReduceOp& op) {
    const auto* supplement = static_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement, "ReduceOp.PREMUL_SUM without a factor");
    if (!supplement->tensor_factor.defined()) {
      return supplement->double_factor;
    }
    const at::Tensor& factor = supplement->tensor_factor;  // a one-element device tensor: read its host bytes
    return view_of(factor, factor.sizes(), factor.strides(), factor.scalar_type()).item<double>();
  }

  // Every tensor of the reduction replaced by a buffer gloo can reduce: the input scaled by
  // `factor` (rounded to the tensor's dtype, as the library's premultiply is), fp8 widened to
  // float. The caller's written tensors get the buffer's result when gloo's work completes.
  void stage(at::ScalarType dtype, std::optional<double> factor) {
    const bool widen = is_float8(dtype);
    const at::ScalarType staged_dtype = widen ? at::kFloat : dtype;
    // The library's scalar has the tensor's type (float for bfloat16 in torch's NCCL binding).
    const double scalar = !factor ? 1.0
        : dtype == at::kHalf ? static_cast<double>(c10::Half(static_cast<float>(*factor)))
        : dtype == at::kDouble ? *factor : static_cast<double>(static_cast<float>(*factor));
    const std::vector<at::Tensor> outputs = written();
    auto is_output = [&](const at::Tensor& t) {
      return std::any_of(outputs.begin(), outputs.end(),
                         [&](const at::Tensor& o) { return o.unsafeGetTensorImpl() == t.unsafeGetTensorImpl(); });
    };
    const bool in_place = op_ == "c10d::allreduce_" || op_ == "c10d::allreduce_coalesced_" || op_ == "c10d::reduce_";
    std::set<const c10::TensorImpl*> reads;
    if (!in_place) {
      const char* inputs_name = op_ == "c10d::reduce_scatter_" ? "input_tensors"
          : op_ == "c10d::_reduce_scatter_base_" ? "input_tensor" : "inputs";
      for (const at::Tensor& t : tensors_of(argument(inputs_name))) {
        reads.insert(t.unsafeGetTensorImpl());
      }
    }
    for_each_argument([&](const at::Tensor& t) {
      const bool read = in_place || reads.count(t.unsafeGetTensorImpl()) > 0;
      if (!read && !widen) {
        return t;  // an output gloo can write directly
      }
      at::Tensor staged;
      if (read) {
        at::Tensor opmath = t.to(dtype == at::kDouble ? at::kDouble : at::kFloat);
        staged = (factor ? opmath.mul(scalar) : opmath).to(staged_dtype).contiguous();
      } else {
        staged = at::empty(t.sizes(), t.options().dtype(staged_dtype));
      }
      if (is_output(t)) {
        write_back_.emplace_back(t, staged);
      }
      return alias(t, staged);
    });
  }

  std::string library_;
  std::string label_;
  std::string op_;
  const c10::FunctionSchema& schema_;
  torch::jit::Stack& stack_;
  size_t first_;
  int world_size_;
  int rank_;
  AliasMap& aliases_;
  std::vector<at::Tensor>& hosts_;
  std::vector<std::pair<at::Tensor, at::Tensor>> write_back_;  // (caller's host alias, staged buffer)
  std::vector<at::Tensor> divide_;  // outputs of an integer AVG
};

}  // namespace

std::optional<std::string> library_of(const c10d::ProcessGroup& group, c10::DeviceType type) {
  std::lock_guard<std::mutex> lock(followers_mutex);
  for (const Follower& f : followers) {
    if (f.type == type) {
      auto alive = f.group.lock();
      if (alive.get() == &group) {
        return f.library;
      }
    }
  }
  return std::nullopt;
}

std::function<void()> follow_library(const std::string& library, const c10::FunctionSchema& schema,
                                     torch::jit::Stack& stack, size_t first, const c10d::ProcessGroup& group,
                                     AliasMap& aliases, std::vector<at::Tensor>& hosts) {
  return Call(library, schema.name(), schema, stack, first, group.getSize(), group.getRank(), aliases, hosts).apply();
}

}  // namespace torchplug_distributed
