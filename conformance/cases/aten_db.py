"""ATen-level entries: operators that OpInfo's samples never dispatch, called as `torch.ops.aten.<op>`.

OpInfo tests torch's Python API, so it reaches an ATen overload only where some public function
decomposes into it. Backends serve ATen overloads, and many of them (out= forms of NN kernels,
backward kernels' `.grad_input` forms, in-place comparison ops, fused optimizers, shift operators,
the attention and transformer fast paths) no OpInfo sample calls. Each entry here is named
`aten.<op>` and calls the OpOverloadPacket, which picks the functional, in-place or out= overload
from the arguments, so one entry serves all of them; the suite's `out` mode passes the out= tensors
under the names the op's schema gives them (`grad_input`, `indices`, `total_weight`, ...).

Samples are written once per forward op (FORWARD); the rest are derived:
  backward kernels    BACKWARD: the forward sample run on the CPU, and the backward's arguments
                      taken by name from the forward's arguments and results (schema-driven)
  in-place variants   INPLACE: `foo_` runs the samples of `foo`
A few ops whose arguments follow no pattern have samples of their own (the rest of FORWARD).
"""

import functools
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

import torch

F32 = frozenset({torch.float32})
I64 = frozenset({torch.int64})


def _t(*shape: int, dtype: torch.dtype = torch.float32, low: float = -2, high: float = 2) -> torch.Tensor:
    from torch.testing import make_tensor

    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high)


def _p(*shape: int) -> torch.Tensor:
    """Values in (0, 1): probabilities, random samples, positive rates."""
    return _t(*shape, low=0.05, high=0.95)


def _idx(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape)


class S:
    """One sample: the op's arguments as it is called (the first becomes SampleInput.input)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = list(args), kwargs

    def sample(self) -> Any:
        from torch.testing._internal.opinfo.core import SampleInput

        return SampleInput(self.args[0], args=tuple(self.args[1:]), kwargs=self.kwargs)


def _pools() -> dict[str, Callable[[], list[S]]]:
    x4, x5 = lambda: _t(1, 2, 6, 6), lambda: _t(1, 2, 4, 4, 4)

    def unpool2d() -> list[S]:
        out, indices = torch.ops.aten.max_pool2d_with_indices(x4(), [2, 2], [2, 2])
        return [S(out, indices, [6, 6])]

    def unpool3d() -> list[S]:
        out, indices = torch.ops.aten.max_pool3d_with_indices(x5(), [2, 2, 2], [2, 2, 2])
        return [S(out, indices, [4, 4, 4], [2, 2, 2], [0, 0, 0])]
    return {
        "adaptive_avg_pool2d": lambda: [S(x4(), [3, 3]), S(_t(2, 5, 7), [2, 4])],
        "adaptive_avg_pool3d": lambda: [S(x5(), [2, 3, 2])],
        "adaptive_max_pool2d": lambda: [S(x4(), [3, 3]), S(_t(2, 5, 7), [2, 4])],
        "adaptive_max_pool3d": lambda: [S(x5(), [2, 3, 2])],
        "avg_pool2d": lambda: [S(x4(), [2, 2], [2, 2], [0, 0], False, True, None),
                               S(x4(), [3, 3], [2, 2], [1, 1], True, False, None)],
        "avg_pool3d": lambda: [S(x5(), [2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, None)],
        "max_pool2d_with_indices": lambda: [S(x4(), [2, 2], [2, 2], [0, 0], [1, 1], False),
                                            S(x4(), [3, 3], [2, 2], [1, 1], [1, 1], True)],
        "max_pool3d_with_indices": lambda: [S(x5(), [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False)],
        "fractional_max_pool2d": lambda: [S(x4(), [2, 2], [3, 3], _p(1, 2, 2))],
        "fractional_max_pool3d": lambda: [S(x5(), [2, 2, 2], [2, 2, 2], _p(1, 2, 3))],
        "max_unpool2d": unpool2d,
        "max_unpool3d": unpool3d,
    }


def _resampling() -> dict[str, Callable[[], list[S]]]:
    x3, x4, x5 = lambda: _t(1, 2, 5), lambda: _t(1, 2, 4, 5), lambda: _t(1, 2, 3, 4, 3)
    table: dict[str, Callable[[], list[S]]] = {
        "upsample_nearest1d": lambda: [S(x3(), [8]), S(x3(), [3], 0.5)],
        "_upsample_nearest_exact1d": lambda: [S(x3(), [8])],
        "upsample_linear1d": lambda: [S(x3(), [8], False), S(x3(), [7], True)],
        "upsample_trilinear3d": lambda: [S(x5(), [4, 5, 6], False), S(x5(), [2, 3, 4], True)],
        "upsample_nearest3d": lambda: [S(x5(), [4, 5, 6])],
        "_upsample_nearest_exact3d": lambda: [S(x5(), [4, 5, 6])],
        "reflection_pad1d": lambda: [S(x3(), [2, 1])],
        "replication_pad1d": lambda: [S(x3(), [2, 1])],
        "reflection_pad2d": lambda: [S(x4(), [1, 2, 2, 1])],
        "replication_pad2d": lambda: [S(x4(), [1, 2, 2, 1])],
        "reflection_pad3d": lambda: [S(x5(), [1, 1, 2, 1, 1, 2])],
        "replication_pad3d": lambda: [S(x5(), [1, 1, 2, 1, 1, 2])],
        "im2col": lambda: [S(x4(), [2, 2], [1, 1], [0, 0], [1, 1])],
        "col2im": lambda: [S(_t(1, 8, 12), [4, 5], [2, 2], [1, 1], [0, 0], [1, 1])],
        "native_channel_shuffle": lambda: [S(_t(1, 6, 2, 2), 3)],
    }
    for name in ("upsample_nearest2d", "_upsample_nearest_exact2d"):
        table[name] = lambda: [S(x4(), [8, 7]), S(x4(), [2, 3])]
    for name in ("upsample_bilinear2d", "upsample_bicubic2d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa",
                 "_upsample_lanczos2d_aa"):
        table[name] = lambda: [S(x4(), [8, 7], False), S(x4(), [3, 3], True)]
    return table


def _losses() -> dict[str, Callable[[], list[S]]]:
    pair = lambda: (_t(3, 4), _t(3, 4))  # noqa: E731
    return {
        "mse_loss": lambda: [S(*pair(), 1), S(*pair(), 0)],
        "huber_loss": lambda: [S(*pair(), 1, 0.5), S(*pair(), 0, 1.0)],
        "smooth_l1_loss": lambda: [S(*pair(), 1, 0.5), S(*pair(), 2, 1.0)],
        "binary_cross_entropy": lambda: [S(_p(3, 4), _p(3, 4), None, 1), S(_p(5), _p(5), _p(5), 0)],
        "multi_margin_loss": lambda: [S(_t(3, 4), _idx(4, 3), 1, 1.0, None, 1), S(_t(3, 4), _idx(4, 3), 2, 0.5, _p(4), 0)],
        "multilabel_margin_loss_forward": lambda: [
            S(_t(3, 4), torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [1, -1, 0, 0]]), 1)],
        "nll_loss_forward": lambda: [S(_t(3, 4), _idx(4, 3), None, 1, -100), S(_t(3, 4), _idx(4, 3), _p(4), 0, 2)],
        "nll_loss2d_forward": lambda: [S(_t(2, 3, 2, 2), _idx(3, 2, 2, 2), None, 1, -100),
                                       S(_t(2, 3, 2, 2), _idx(3, 2, 2, 2), _p(3), 2, 1)],
        # full lengths: torch's CPU kernel leaves log_alpha past an input's or a target's length uninitialised
        "_ctc_loss": lambda: [S(_t(6, 2, 4).log_softmax(2), _idx(3, 2, 3) + 1, torch.tensor([6, 6]),
                                torch.tensor([3, 3]), 0, False)],
    }


def _activations() -> dict[str, Callable[[], list[S]]]:
    x = lambda: _t(3, 4)  # noqa: E731
    return {
        "silu": lambda: [S(x())], "mish": lambda: [S(x())], "hardsigmoid": lambda: [S(_t(3, 4, low=-4, high=4))],
        "hardswish": lambda: [S(_t(3, 4, low=-4, high=4))], "sigmoid": lambda: [S(x())], "tanh": lambda: [S(x())],
        "hardtanh": lambda: [S(x(), -1.0, 1.0), S(x(), -0.5, 1.5)],
        "elu": lambda: [S(x(), 1.0, 1.0, 1.0), S(x(), 0.5, 2.0, 1.5)],
        "glu": lambda: [S(_t(3, 4), -1), S(_t(4, 3), 0)],
        "leaky_relu": lambda: [S(x(), 0.01), S(x(), 0.3)],
        "threshold": lambda: [S(x(), 0.5, -1.0)],
        "gelu": lambda: [S(x()), S(x(), approximate="tanh")],
        "hardshrink": lambda: [S(x(), 0.5)], "softshrink": lambda: [S(x(), 0.5)],
        "log_sigmoid_forward": lambda: [S(x())],
        "logit": lambda: [S(_p(3, 4), None), S(_p(3, 4), 0.1)],
        "softplus": lambda: [S(x(), 1.0, 20.0), S(x(), 2.0, 1.0)],
        # not training: the noise is not drawn, and the result is deterministic
        "rrelu_with_noise": lambda: [S(x(), torch.zeros(3, 4), 0.1, 0.3, False)],
        "relu": lambda: [S(x())],
        "clamp": lambda: [S(x(), -0.5, 0.5), S(x(), _t(3, 4), _t(3, 4))],
        "clamp_min": lambda: [S(x(), 0.5), S(x(), _t(3, 4))],
        "clamp_max": lambda: [S(x(), 0.5), S(x(), _t(3, 4))],
        "_add_relu": lambda: [S(x(), x()), S(x(), x(), alpha=2), S(x(), 0.5)],
        "_softmax": lambda: [S(x(), 1, False), S(x(), 0, False)],
        "_log_softmax": lambda: [S(x(), 1, False)],
        "_masked_softmax": lambda: [
            S(_t(2, 3, 4), torch.tensor([[False, True, False, False]] * 3).expand(2, 3, 4).clone(), -1, None)],
        "glu_jvp": lambda: [S(torch.nn.functional.glu(_t(3, 4), -1), _t(3, 4), _t(3, 4), -1)],
        # (grad_x, grad_glu, x, dgrad_glu, dx, dim): the forward-mode derivative of glu's backward
        "glu_backward_jvp": lambda: [S(_t(3, 4), _t(3, 2), _t(3, 4), _t(3, 2), _t(3, 4), -1)],
    }


def _convolutions() -> dict[str, Callable[[], list[S]]]:
    return {
        "_slow_conv2d_forward": lambda: [S(_t(1, 2, 5, 5), _t(3, 2, 3, 3), [3, 3], _t(3), [1, 1], [1, 1]),
                                         S(_t(1, 2, 5, 5), _t(3, 2, 2, 2), [2, 2], None, [2, 2], [0, 0])],
        "slow_conv3d_forward": lambda: [S(_t(1, 2, 4, 4, 4), _t(3, 2, 2, 2, 2), [2, 2, 2], _t(3), [1, 1, 1], [0, 0, 0])],
        "slow_conv_dilated2d": lambda: [S(_t(1, 2, 6, 6), _t(3, 2, 2, 2), [2, 2], _t(3), [1, 1], [0, 0], [2, 2])],
        "slow_conv_dilated3d": lambda: [S(_t(1, 2, 5, 5, 5), _t(3, 2, 2, 2, 2), [2, 2, 2], _t(3), [1, 1, 1], [0, 0, 0],
                                          [2, 2, 2])],
        "slow_conv_transpose2d": lambda: [S(_t(1, 2, 4, 4), _t(2, 3, 2, 2), [2, 2], _t(3), [2, 2], [0, 0], [1, 1], [1, 1])],
        "slow_conv_transpose3d": lambda: [S(_t(1, 2, 3, 3, 3), _t(2, 3, 2, 2, 2), [2, 2, 2], _t(3), [1, 1, 1], [0, 0, 0],
                                            [0, 0, 0], [1, 1, 1])],
        "_weight_norm_interface": lambda: [S(_t(4, 3), _p(4, 1), 0), S(_t(2, 5), _p(1, 5), 1)],
        "_embedding_bag": lambda: [S(_t(6, 3), torch.tensor([0, 2, 4, 1, 5]), torch.tensor([0, 2]), False, mode, False)
                                   for mode in (1, 2)],
        "_scaled_dot_product_flash_attention_for_cpu": lambda: [
            S(_t(1, 2, 4, 8), _t(1, 2, 4, 8), _t(1, 2, 4, 8)), S(_t(1, 2, 3, 8), _t(1, 2, 5, 8), _t(1, 2, 5, 8), 0.0, True)],
    }


def _comparisons() -> dict[str, Callable[[], list[S]]]:
    table: dict[str, Callable[[], list[S]]] = {
        name: (lambda: [S(_t(3, 4), 0.5), S(_t(3, 4), -1)]) for name in ("eq", "ne", "lt", "le", "gt", "ge")}
    for name in ("__lshift__", "__rshift__", "__ilshift__", "__irshift__"):
        table[name] = lambda: [S(_t(3, 4, dtype=torch.int64, low=-50, high=50), 3),
                               S(_t(3, 4, dtype=torch.int64, low=-50, high=50), _idx(8, 3, 4))]
    return table


def _reductions() -> dict[str, Callable[[], list[S]]]:
    return {
        "norm": lambda: [S(_t(3, 4), 2, [1], False), S(_t(3, 4), 3.0, [0], True, dtype=torch.float64),
                         S(_t(3, 4), None, [1], False, dtype=torch.float64)],
        "linalg__powsum": lambda: [S(_t(3, 4)), S(_t(3, 4), 3, [1], True)],
        "prod": lambda: [S(_t(3, 4), 1), S(_t(3, 4), 0, True)],
        "_aminmax": lambda: [S(_t(3, 4)), S(_t(3, 4), 1, False), S(_t(3, 4), 0, True)],
        "_compute_linear_combination": lambda: [S(_t(3, 4, 2), _t(5, 3))],
        "_stack": lambda: [S([_t(3, 4), _t(3, 4)], 0), S([_t(3, 4), _t(3, 4), _t(3, 4)], 2)],
        "_addmm_activation": lambda: [S(_t(4), _t(3, 5), _t(5, 4)), S(_t(3, 4), _t(3, 5), _t(5, 4), beta=0.5, alpha=2,
                                                                      use_gelu=True)],
        "_int_mm": lambda: [S(_t(17, 8, dtype=torch.int8), _t(8, 16, dtype=torch.int8))],
        "_weight_int8pack_mm": lambda: [S(_t(3, 8), _t(4, 8, dtype=torch.int8), _p(4))],
        "narrow_copy": lambda: [S(_t(4, 5), 1, 1, 3), S(_t(4, 5), 0, 2, 2)],
        "nonzero_static": lambda: [S(_t(3, 4), size=8), S(_t(3, 4), size=20, fill_value=-1)],
        "index": lambda: [S(_t(4, 5), [_idx(4, 3)]), S(_t(4, 5), [None, _idx(5, 2, 2)])],
        "scatter": lambda: [S(_t(3, 4), 1, _idx(4, 3, 2), 1.5), S(_t(3, 4), 0, _idx(3, 2, 4), 2.0, reduce="multiply"),
                            S(_t(3, 4), 1, _idx(4, 3, 3), -1.0, reduce="add")],
        "pow": lambda: [S(2.0, _t(3, 4)), S(0.5, _t(5))],
        "remainder": lambda: [S(5.0, _t(3, 4, low=0.5, high=3)), S(-3, _t(5, low=0.5, high=3))],
        "isin": lambda: [S(1, _idx(4, 5)), S(_idx(4, 5), 2), S(_idx(4, 5), 2, invert=True)],
        "bucketize": lambda: [S(0.3, torch.tensor([-1.0, 0.0, 0.5, 1.0])),
                              S(2.0, torch.tensor([-1.0, 0.0, 0.5, 1.0]), right=True)],
        "searchsorted": lambda: [S(torch.tensor([-1.0, 0.0, 0.5, 1.0]), 0.3),
                                 S(torch.tensor([-1.0, 0.0, 0.5, 1.0]), 0.5, right=True)],
        "unique_dim": lambda: [S(torch.tensor([[1, 2], [3, 4], [1, 2]]), 0, True, True, True),
                               S(torch.tensor([[1, 2, 1], [3, 4, 3]]), 1, True, False, False)],
        "unique_dim_consecutive": lambda: [S(torch.tensor([[1, 2], [1, 2], [3, 4], [1, 2]]), 0, True, True)],
        "embedding_renorm_": lambda: [S(_t(5, 3), torch.tensor([0, 2, 4]), 1.0, 2.0)],
    }


def _statistical() -> dict[str, Callable[[], list[S]]]:
    """Random ops (compared by statistics: opinfo's _RANDOM names them) and their deterministic gradients."""
    return {
        "binomial": lambda: [S(torch.full((16, 16), 10.0), torch.full((16, 16), 0.3))],
        "poisson": lambda: [S(torch.full((16, 16), 4.0))],
        "_standard_gamma": lambda: [S(torch.full((16, 16), 2.0))],
        "_sample_dirichlet": lambda: [S(torch.full((64, 4), 1.5))],
        "normal": lambda: [S(0.5, torch.full((16, 16), 2.0))],
        "random_": lambda: [S(torch.zeros(16, 16)), S(torch.zeros(16, 16), 10), S(torch.zeros(16, 16), 3, 10)],
        "_standard_gamma_grad": lambda: [S(_p(3, 4) + 1, _p(3, 4) + 0.5)],
        "_dirichlet_grad": lambda: [S(_p(3, 4), _p(3, 4) + 1, _p(3, 4) + 4)],
    }


def _normalization() -> dict[str, Callable[[], list[S]]]:
    x = lambda: _t(2, 3, 4)  # noqa: E731
    return {
        "_native_batch_norm_legit": lambda: [S(x(), _t(3), _t(3), True, 0.1, 1e-5), S(x(), None, None, True, 0.1, 1e-5)],
        "_batch_norm_with_update": lambda: [S(x(), _t(3), _t(3), torch.zeros(3), torch.ones(3), 0.1, 1e-5)],
        "batch_norm_update_stats": lambda: [S(x(), torch.zeros(3), torch.ones(3), 0.1), S(x(), None, None, 0.1)],
    }


def _attention() -> dict[str, Callable[[], list[S]]]:
    embed, heads = 8, 2

    def mha() -> list[S]:
        q = _t(2, 3, embed)
        weights = (_t(3 * embed, embed), _t(3 * embed), _t(embed, embed), _t(embed))
        return [S(q, q, q, embed, heads, *weights), S(q, _t(2, 3, embed), _t(2, 3, embed), embed, heads, *weights,
                                                      None, False)]

    def encoder_layer() -> list[S]:
        weights = [_t(3 * embed, embed), _t(3 * embed), _t(embed, embed), _t(embed), use_gelu, norm_first, 1e-5,
                   _t(embed), _t(embed), _t(embed), _t(embed), _t(16, embed), _t(16), _t(embed, 16), _t(embed)]
        return [S(_t(2, 3, embed), embed, heads, *weights)]
    use_gelu, norm_first = False, True
    return {
        "_native_multi_head_attention": mha,
        "_transformer_encoder_layer_fwd": encoder_layer,
        "_transform_bias_rescale_qkv": lambda: [S(_t(2, 3, 3 * embed), _t(3 * embed), heads)],
        "_fused_sdp_choice": lambda: [S(_t(1, 2, 4, 8), _t(1, 2, 4, 8), _t(1, 2, 4, 8))],
        "_jagged_to_padded_dense_forward": lambda: [S(_t(6, 3), [torch.tensor([0, 2, 6])], [4], 0.0)],
        "_padded_dense_to_jagged_forward": lambda: [S(_t(2, 4, 3), [torch.tensor([0, 2, 6])], 6)],
    }


def _fused_optimizers() -> dict[str, Callable[[], list[S]]]:
    """In-place list ops: OptimizerStep returns the lists they update, so the results can be compared."""
    def lists(count: int, steps: bool = False) -> list[list[torch.Tensor]]:
        made = [[_t(3, 4), _t(5)] for _ in range(count)]
        return made + ([[torch.tensor(3.0), torch.tensor(5.0)]] if steps else [])

    def lr(tensor: bool) -> Any:
        return torch.tensor(0.1) if tensor else 0.1

    def adam(tensor_lr: bool) -> list[S]:
        params, grads, avgs, sqs, steps = lists(4, steps=True)
        sqs = [s.abs() for s in sqs]
        hyper = dict(beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8, maximize=False, lr=lr(tensor_lr))
        return [S(params, grads, avgs, sqs, [], steps, amsgrad=False, **hyper),
                S(params, grads, avgs, sqs, [s.clone() for s in sqs], steps, amsgrad=True, **hyper)]

    def sgd(tensor_lr: bool) -> list[S]:
        params, grads, momenta = lists(3)
        hyper = dict(weight_decay=0.01, momentum=0.9, dampening=0.0, maximize=False, is_first_step=False, lr=lr(tensor_lr))
        return [S(params, grads, momenta, nesterov=True, **hyper), S(params, grads, momenta, nesterov=False, **hyper)]

    def adagrad(tensor_lr: bool) -> list[S]:
        params, grads, sums, steps = lists(3, steps=True)
        sums = [s.abs() for s in sums]
        return [S(params, grads, sums, steps, lr=lr(tensor_lr), lr_decay=0.0, weight_decay=0.01, eps=1e-10, maximize=False)]

    def unscale() -> list[S]:
        return [S([_t(3, 4), _t(5)], torch.zeros(()), torch.tensor(0.5)),
                S([_t(3, 4), torch.tensor([1.0, float("inf")])], torch.zeros(()), torch.tensor(0.25))]

    def update_scale() -> list[S]:
        return [S(torch.tensor(2.0 ** 16), torch.tensor(1, dtype=torch.int32), torch.tensor(0.0), 2.0, 0.5, 2),
                S(torch.tensor(2.0 ** 16), torch.tensor(0, dtype=torch.int32), torch.tensor(1.0), 2.0, 0.5, 2)]
    table = {name: functools.partial(make, tensor_lr) for tensor_lr, suffix in ((False, ""), (True, ".tensor_lr"))
             for name, make in ((f"_fused_adam_{suffix}", adam), (f"_fused_adamw_{suffix}", adam),
                                (f"_fused_sgd_{suffix}", sgd), (f"_fused_adagrad_{suffix}", adagrad))}
    return {**table, "_amp_foreach_non_finite_check_and_unscale_": unscale, "_amp_update_scale_": update_scale}


def _tensor_state() -> dict[str, Callable[[], list[S]]]:
    def from_file() -> list[S]:
        path = os.path.join(tempfile.gettempdir(), "torchplug-conformance-from_file.bin")
        torch.arange(12, dtype=torch.float32).numpy().tofile(path)
        return [S(path, False, 12, dtype=torch.float32, device="cpu")]
    return {
        "set_": lambda: [S(_t(3, 4)), S(_t(3, 4), _t(2, 5))],
        "is_set_to": lambda: [S(_t(3, 4), _t(3, 4))],
        "_assert_async": lambda: [S(torch.tensor(1.0)), S(torch.tensor(True), "must hold")],
        "_functional_assert_async": lambda: [S(torch.tensor(1.0), "must hold", torch.ones(()))],
        "_convert_indices_from_coo_to_csr": lambda: [S(torch.tensor([0, 0, 1, 3, 3]), 4),
                                                     S(torch.tensor([0, 1, 1, 2]), 3, out_int32=True)],
        "_convert_indices_from_csr_to_coo": lambda: [S(torch.tensor([0, 2, 3, 5]), torch.tensor([0, 1, 1, 0, 2])),
                                                     S(torch.tensor([0, 1, 3]), torch.tensor([2, 0, 1]), out_int32=True,
                                                       transpose=True)],
        "_validate_compressed_sparse_indices": lambda: [S(True, torch.tensor([0, 2, 3, 5]), torch.tensor([0, 1, 1, 0, 2]),
                                                          3, 3, 5)],
        "_nested_compute_contiguous_strides_offsets": lambda: [S(torch.tensor([[2, 3], [4, 3]]))],
        "from_file": from_file,
    }


_QUANT_ACTIVATIONS = (torch.float32, torch.bfloat16, torch.float16)


def _quantization() -> dict[str, Callable[[], list[S]]]:
    """Quantization helpers that take and give plain strided tensors."""
    per_channel = lambda: (_t(3, 4), _p(3) / 10, torch.tensor([0.0, 1.0, -1.0]))  # noqa: E731
    return {
        "_fake_quantize_learnable_per_tensor_affine": lambda: [S(_t(3, 4), torch.tensor([0.1]), torch.tensor([1.0]),
                                                                 -8, 7, 1.0)],
        "_fake_quantize_learnable_per_channel_affine": lambda: [S(*per_channel(), 0, -8, 7, 1.0)],
        "fake_quantize_per_tensor_affine_cachemask": lambda: [S(_t(3, 4), 0.1, 1, -8, 7)],
        "fake_quantize_per_channel_affine_cachemask": lambda: [
            S(_t(3, 4), _p(3) / 10, torch.tensor([0, 1, -1], dtype=torch.int32), 0, -8, 7)],
        "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams": lambda: [
            S(_t(3, 4), torch.tensor([0.1]), torch.tensor([1], dtype=torch.int32), torch.tensor([1]), -8, 7)],
        "_fused_moving_avg_obs_fq_helper": lambda: [
            S(_t(3, 4), torch.tensor([1]), torch.tensor([1]), torch.tensor(-1.0), torch.tensor(1.0),
              torch.tensor([0.1]), torch.tensor([0], dtype=torch.int32), 0.01, 0, 255, 0, False, False)],
        # (input, weight0..3, hx_, cx_, reverse, batch_sizes, mode=LSTM, hidden_size, num_layers, has_biases,
        #  bidirectional, batch_first, train): oneDNN's LSTM layer on plain tensors
        "mkldnn_rnn_layer": lambda: [S(_t(3, 2, 4), _t(20, 4), _t(20, 5), _t(20), _t(20), _t(2, 5), _t(2, 5), False, [],
                                       2, 5, 1, True, False, False, True)],
        "_convert_weight_to_int4pack_for_cpu": lambda: [S(torch.randint(0, 16, (16, 64), dtype=torch.int32), 2)],
        # weight-only quantized products, with fp32 / bf16 / fp16 activations: a decode row, a few rows,
        # and more rows than a backend's skinny path takes; int8 with an odd k, int4 with a narrower last block.
        # Neither has a float64 kernel to arbitrate a different summation order, so the values keep fp32's
        # rounding of the sums below float32's atol (1e-5) with results of order 1.
        "_weight_int4pack_mm_for_cpu": lambda: [
            S(_t(m, 64, dtype=dtype), torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                torch.randint(0, 16, (n, 64), dtype=torch.int32), 2), 32, _t(2, n, 2, dtype=dtype, low=-0.1, high=0.1))
            for dtype in _QUANT_ACTIVATIONS for m, n in ((1, 80), (3, 16), (20, 64))],
        "_weight_int8pack_mm": lambda: [
            S(_t(m, k, dtype=dtype, low=-0.5, high=0.5), torch.randint(-128, 128, (n, k), dtype=torch.int8),
              (_p(n) / 100).to(dtype))
            for dtype in _QUANT_ACTIVATIONS for m, k, n in ((1, 64, 48), (3, 37, 16), (20, 64, 40))],
        # (weights, scales_zeros, bias, block_size, in_features, out_features): packs uint8 4-bit pairs
        "_dyn_quant_pack_4bit_weight": lambda: [S(torch.randint(0, 255, (16, 16), dtype=torch.uint8), _t(16, 1), None,
                                                  32, 32, 16)],
        "_dyn_quant_matmul_4bit": lambda: [S(_t(3, 32), torch.ops.aten._dyn_quant_pack_4bit_weight(
            torch.randint(0, 255, (16, 16), dtype=torch.uint8), _t(16, 1), None, 32, 32, 16), 32, 32, 16)],
        "_scaled_mm": lambda: [S(_t(16, 32).to(torch.float8_e4m3fn), _t(16, 32).to(torch.float8_e4m3fn).t(),
                                 torch.tensor(0.5), torch.tensor(2.0), out_dtype=torch.float32)],
    }


def _test_only() -> dict[str, Callable[[], list[S]]]:
    """torch's own dispatcher fixtures: plain kernels, callable like any other."""
    return {
        "_foobar": lambda: [S(_t(3, 4)), S(_t(3, 4), False, arg3=False)],
        "_test_optional_intlist": lambda: [S(_t(3, dtype=torch.int32, low=0, high=9), [1, 2, 3]),
                                           S(_t(3, dtype=torch.int32, low=0, high=9), None)],
        "_test_optional_filled_intlist": lambda: [S(_t(2, dtype=torch.int32, low=0, high=9), [1, 2])],
        "_test_optional_floatlist": lambda: [S(_t(2), [0.5, 1.5]), S(_t(2), None)],
        "_test_functorch_fallback": lambda: [S(_t(3, 4), _t(3, 4))],
    }


@functools.cache
def forward_table() -> dict[str, Callable[[], list[S]]]:
    table: dict[str, Callable[[], list[S]]] = {}
    for family in (_pools, _resampling, _losses, _activations, _convolutions, _comparisons, _reductions,
                   _statistical, _normalization, _attention, _fused_optimizers, _tensor_state, _quantization,
                   _test_only):
        table.update(family())
    return table


# Each entry runs under one dtype, float32, or int64 for these ops on integers: the samples choose their
# tensors' dtypes themselves (int8 for _int_mm, float8 for _scaled_mm), and the dtype names the case.
_INTEGER_OPS = frozenset({"__lshift__", "__rshift__", "__ilshift__", "__irshift__", "isin", "unique_dim",
                          "unique_dim_consecutive", "_convert_indices_from_coo_to_csr",
                          "_convert_indices_from_csr_to_coo", "_validate_compressed_sparse_indices",
                          "_nested_compute_contiguous_strides_offsets", "_int_mm", "_convert_weight_to_int4pack_for_cpu",
                          "_test_optional_intlist", "_test_optional_filled_intlist"})

# In-place variants that run their functional op's samples.
INPLACE = {f"{op}_": op for op in ("eq", "ne", "lt", "le", "gt", "ge", "gelu", "relu", "hardtanh", "hardswish",
                                   "clamp_max", "_add_relu", "scatter")}

# Backward kernels, from the forward op whose sample they derive from (backward name minus "_backward"
# unless named here), with the arguments that do not follow by name from the forward's arguments and
# results. Lambdas get the forward's bound arguments and results by name.
BACKWARD: dict[str, tuple[str | None, dict[str, Callable[[dict[str, Any]], Any]]]] = {
    **{name: (None, {}) for name in (
        "_upsample_bicubic2d_aa_backward", "_upsample_bilinear2d_aa_backward", "_upsample_lanczos2d_aa_backward",
        "_upsample_nearest_exact1d_backward", "_upsample_nearest_exact2d_backward", "_upsample_nearest_exact3d_backward",
        "upsample_bicubic2d_backward", "upsample_bilinear2d_backward", "upsample_linear1d_backward",
        "upsample_nearest1d_backward", "upsample_nearest2d_backward", "upsample_nearest3d_backward",
        "upsample_trilinear3d_backward", "adaptive_avg_pool3d_backward", "adaptive_max_pool2d_backward",
        "adaptive_max_pool3d_backward", "avg_pool2d_backward", "avg_pool3d_backward", "binary_cross_entropy_backward",
        "fractional_max_pool2d_backward", "fractional_max_pool3d_backward", "gelu_backward", "glu_backward",
        "hardshrink_backward", "hardsigmoid_backward", "hardtanh_backward", "logit_backward", "mse_loss_backward",
        "multi_margin_loss_backward", "reflection_pad1d_backward", "reflection_pad2d_backward",
        "reflection_pad3d_backward", "replication_pad1d_backward", "replication_pad2d_backward",
        "replication_pad3d_backward", "sigmoid_backward", "silu_backward", "softplus_backward", "softshrink_backward",
        "tanh_backward", "threshold_backward", "mish_backward", "huber_loss_backward", "smooth_l1_loss_backward")},
    "max_pool2d_with_indices_backward": (None, {}),
    "max_pool3d_with_indices_backward": (None, {}),
    "nll_loss_backward": ("nll_loss_forward", {}),
    "nll_loss2d_backward": ("nll_loss2d_forward", {}),
    "multilabel_margin_loss_backward": ("multilabel_margin_loss_forward", {}),
    "log_sigmoid_backward": ("log_sigmoid_forward", {}),
    "elu_backward": (None, {"is_result": lambda a: False, "self_or_result": lambda a: a["self"]}),
    "leaky_relu_backward": (None, {"self_is_result": lambda a: False}),
    "_slow_conv2d_backward": ("_slow_conv2d_forward", {"output_mask": lambda a: [True, True, a["bias"] is not None]}),
    "_slow_conv2d_backward.grad_input": ("_slow_conv2d_forward", {}),
    "_ctc_loss_backward": ("_ctc_loss", {"grad": lambda a: _t(*a["neg_log_likelihood"].shape)}),
    "_weight_norm_interface_backward": ("_weight_norm_interface", {
        "grad_w": lambda a: _t(*a["v"].shape), "saved_v": lambda a: a["v"], "saved_g": lambda a: a["g"],
        "saved_norms": lambda a: a["norms"]}),
    "_softmax_backward_data": ("_softmax", {"input_dtype": lambda a: a["self"].dtype}),
    "_log_softmax_backward_data": ("_log_softmax", {"input_dtype": lambda a: a["self"].dtype}),
    "_masked_softmax_backward": ("_masked_softmax", {}),
    "_embedding_bag_dense_backward": ("_embedding_bag", {
        "grad": lambda a: _t(*a["output"].shape), "num_weights": lambda a: a["weight"].shape[0]}),
    "_scaled_dot_product_flash_attention_for_cpu_backward": ("_scaled_dot_product_flash_attention_for_cpu", {
        "grad_out": lambda a: _t(*a["output"].shape), "out": lambda a: a["output"]}),
    "mkldnn_rnn_layer_backward": ("mkldnn_rnn_layer", {
        **{f"weight{i + 1}": (lambda i: lambda a: a[f"weight{i}"])(i) for i in range(4)},
        "cx_tmp": lambda a: a["cx_"], "grad_hy": lambda a: _t(*a["hy_"].shape), "grad_cy": lambda a: _t(*a["cy_"].shape)}),
    "_fake_quantize_learnable_per_tensor_affine_backward": ("_fake_quantize_learnable_per_tensor_affine", {
        "grad": lambda a: _t(*a["self"].shape)}),
    "_fake_quantize_learnable_per_channel_affine_backward": ("_fake_quantize_learnable_per_channel_affine", {
        "grad": lambda a: _t(*a["self"].shape)}),
}

# The names of results that neither the schema nor its out= overload name (out0, out1, ...), for backward derivation.
RESULT_NAMES = {
    "_ctc_loss": ("neg_log_likelihood", "log_alpha"), "_weight_norm_interface": ("output", "norms"),
    "_embedding_bag": ("output", "offset2bag", "bag_size", "maximum_indices"),
    "_scaled_dot_product_flash_attention_for_cpu": ("output", "logsumexp"),
    "mkldnn_rnn_layer": ("output", "hy_", "cy_", "workspace"),
}
_GRAD_NAMES = ("grad_output", "grad_out", "grad")


def _resolve(name: str) -> Any:
    """`torch.ops.aten.<name>`: the packet, or for `op.overload` (where the packet would pick another
    overload: a 0-dim tensor passes for a float) that overload."""
    op = torch.ops.aten
    for part in name.split("."):
        op = getattr(op, part)
    return op


def _exists(name: str) -> bool:
    """Whether this torch has the op: the table spans releases, and older ones lack newer ops
    (2.11 has no `_upsample_lanczos2d_aa`)."""
    try:
        _resolve(name)
    except AttributeError:
        return False
    return True


def _schemas(name: str) -> list[Any]:
    op = _resolve(name)
    if isinstance(op, torch._ops.OpOverload):
        return [op._schema]
    return [getattr(op, overload)._schema for overload in op.overloads()]


def _out_arguments(schema: Any) -> list[str]:
    return [a.name for a in schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


def out_names(name: str) -> tuple[str, ...]:
    """The keyword names of the op's out= tensors (`out`; `grad_input`; `out`, `indices`; ...), () if none."""
    for schema in _schemas(name):
        if names := _out_arguments(schema):
            return tuple(names)
    return ()


class OutOnly:
    """An op with only an out= overload (adaptive_avg_pool3d_backward.grad_input): called without its
    out= tensors, it is given empty ones (which it resizes) on the device of its first tensor argument."""

    def __init__(self, name: str, names: tuple[str, ...]) -> None:
        self.packet, self.names, self.__name__ = _resolve(name), names, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not any(n in kwargs for n in self.names):
            first = next(t for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor))
            kwargs.update({n: torch.empty(0, dtype=first.dtype, device=first.device) for n in self.names})
        return self.packet(*args, **kwargs)


class Returning:
    """An in-place op that returns nothing (fused optimizers, `_amp_*`): it returns the arguments it
    writes (by position), so the suite compares what it wrote."""

    def __init__(self, name: str, written: tuple[int, ...]) -> None:
        self.packet, self.written, self.__name__ = _resolve(name), written, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.packet(*args, **kwargs)
        written = tuple(args[i] for i in self.written)
        return written if result is None else (result, *written)


class Leading:
    """An op whose last results are scratch memory (mkldnn_rnn_layer's oneDNN workspace, for its backward):
    only its first `count` results are compared."""

    def __init__(self, name: str, count: int) -> None:
        self.op, self.count, self.__name__ = _resolve(name), count, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.op(*args, **kwargs)[:self.count]


# Results to compare, of ops whose other results are scratch memory.
LEADING = {"mkldnn_rnn_layer": 3}
# In-place ops that return nothing or not all they write: which positional arguments they write.
WRITES = {"_fused_adam_": (0, 2, 3, 4), "_fused_adamw_": (0, 2, 3, 4), "_fused_sgd_": (0, 2), "_fused_adagrad_": (0, 2),
          "_amp_foreach_non_finite_check_and_unscale_": (0, 1), "_amp_update_scale_": (1,),
          "_fused_moving_avg_obs_fq_helper": (3, 4, 5, 6),
          "embedding_renorm_": (0,)}


def callable_for(name: str, every_result: bool = False) -> Callable[..., Any]:
    """What the entry calls; with `every_result` what it returns is the op's own results (a workspace too)."""
    if name in LEADING and not every_result:
        return Leading(name, LEADING[name])
    if (written := WRITES.get(name.split(".")[0])) is not None and not every_result:
        return Returning(name, written)
    schemas = _schemas(name)
    if all(_out_arguments(s) for s in schemas):
        return OutOnly(name, out_names(name))
    return _resolve(name)


def _bind(schema: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments by name, defaults filled in."""
    positional = [a for a in schema.arguments if not a.kwarg_only]
    bound = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    bound.update({a.name: v for a, v in zip(positional, args)})
    bound.update(kwargs)
    return bound


def _functional_schema(name: str, bound: dict[str, Any] | None = None) -> Any:
    """The first overload (those without out= tensors first) whose arguments without a default `bound` has."""
    schemas = sorted(_schemas(name), key=lambda s: bool(_out_arguments(s)))
    for schema in schemas if bound is not None else ():
        outs = _out_arguments(schema)
        if all(a.name in bound for a in schema.arguments if a.name not in outs and not a.has_default_value()):
            return schema
    return schemas[0]


def _result_names(name: str, schema: Any) -> tuple[str, ...]:
    if name in RESULT_NAMES:
        return RESULT_NAMES[name]
    names = tuple(r.name for r in schema.returns)
    return names if all(names) else out_names(name)  # the out= overload names them: (out, indices), ...


def _backward_samples(backward: str, forward: str, overrides: dict[str, Callable[[dict[str, Any]], Any]]) -> list[S]:
    """The backward kernel's arguments, by name, from each forward sample run on the CPU."""
    samples = []
    schema, run_forward = _functional_schema(forward), callable_for(forward, every_result=True)
    for sample in forward_table()[forward]():
        bound = _bind(schema, sample.args, sample.kwargs)
        results = run_forward(*sample.args, **sample.kwargs)
        results = results if isinstance(results, tuple) else (results,)
        bound.update(zip(_result_names(forward, schema), results))
        bound.setdefault("output", results[0])
        bound.setdefault("result", results[0])
        if isinstance(bound.get("self"), torch.Tensor):
            bound.setdefault("input_size", list(bound["self"].shape))
        grad = _t(*results[0].shape)
        for grad_name in _GRAD_NAMES:
            bound.setdefault(grad_name, grad)
        bound.update({key: make(bound) for key, make in overrides.items()})
        target = _functional_schema(backward, bound)
        outs = _out_arguments(target)
        args = [bound.get(a.name, a.default_value) for a in target.arguments if not a.kwarg_only]
        kwargs = {a.name: bound[a.name] for a in target.arguments if a.kwarg_only and a.name not in outs
                  and a.name in bound}
        samples.append(S(*args, **kwargs))
    return samples


# Forward kernels that trust their caller for their inputs' shapes or dtypes (torch's CPU kernels crash on
# an empty input here, or set_ takes a bool source's storage as floats, reading past it): like backward
# kernels, they get no shape or scalar-type variants (OpEntry.validates_inputs).
_TRUSTING = frozenset({"_nested_compute_contiguous_strides_offsets", "_transform_bias_rescale_qkv",
                       "_weight_norm_interface", "set_"})


def _dtypes(name: str) -> frozenset[torch.dtype]:
    return I64 if name in _INTEGER_OPS else F32


# Ops whose out= form the out mode cannot judge: torch's CPU kernel adds into the out= tensor it is
# given, so the empty one the mode passes gives undefined values (on the CPU too).
_ACCUMULATING_OUT = frozenset({"_compute_linear_combination"})


def entries(entry_type: Callable[..., Any]) -> list[Any]:
    """Every ATen-level entry, named `aten.<op>`, made by `entry_type` (opinfo.OpEntry: opinfo.py joins
    these entries into all_ops(), so this module does not import it)."""
    def entry(name: str, make: Callable[[], list[S]], dtype_of: str, trusting: bool = False) -> Any:
        def samples(dtype: torch.dtype, grad: bool) -> Iterable[Any]:
            return (s.sample() for s in make())
        outs = out_names(name) if name.split(".")[0] not in WRITES and name not in _ACCUMULATING_OUT else ()
        return entry_type(name=f"aten.{name}", op=callable_for(name), dtypes=_dtypes(dtype_of),
                          backward_dtypes=frozenset(), supports_out=bool(outs), sample_fn=samples, out_names=outs,
                          validates_inputs=not (trusting or name in _TRUSTING))

    made = [entry(name, make, name) for name, make in forward_table().items() if _exists(name)]
    made += [entry(name, forward_table()[functional], functional) for name, functional in INPLACE.items()
             if _exists(name) and _exists(functional)]
    for backward, (forward, overrides) in BACKWARD.items():
        forward = forward or backward.removesuffix("_backward")
        if _exists(backward) and _exists(forward.split(".")[0]):
            made.append(entry(backward, functools.partial(_backward_samples, backward, forward, overrides),
                              forward, trusting=True))
    return made
