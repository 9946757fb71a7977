"""A Llama-architecture decoder with random weights: RMSNorm, rotary (HF's rotate-half layout), GQA
attention through scaled_dot_product_attention, SwiGLU MLP, untied head.

Parameter names are HF transformers' LlamaForCausalLM names, so its state dict loads into one.
The KV cache is static (one buffer per layer, `max_len` long) and the position is a tensor, so a
torch.compile'd step has fixed shapes and compiles once per (batch, tokens) shape.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    rope_theta: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


PRESETS = {
    "tiny": Config(hidden=256, layers=2, heads=4, kv_heads=2, intermediate=768, vocab=2048),
    "111m": Config(hidden=1024, layers=4, heads=16, kv_heads=4, intermediate=2816, vocab=32000),
    "499m": Config(hidden=2048, layers=8, heads=16, kv_heads=4, intermediate=5632, vocab=32000),
}


def random_state(config: Config, seed: int = 0) -> dict[str, torch.Tensor]:
    """float32 weights in HF LlamaForCausalLM names (std 0.02 as HF's init; norms at 1)."""
    gen = torch.Generator().manual_seed(seed)
    h, kv = config.hidden, config.kv_heads * config.head_dim
    shapes = {"model.embed_tokens.weight": (config.vocab, h), "lm_head.weight": (config.vocab, h)}
    for i in range(config.layers):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                   p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                   p + "mlp.gate_proj.weight": (config.intermediate, h), p + "mlp.up_proj.weight": (config.intermediate, h),
                   p + "mlp.down_proj.weight": (h, config.intermediate)}
    state = {name: torch.randn(shape, generator=gen) * 0.02 for name, shape in shapes.items()}
    for i in range(config.layers):
        state[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(h)
        state[f"model.layers.{i}.post_attention_layernorm.weight"] = torch.ones(h)
    state["model.norm.weight"] = torch.ones(h)
    return state


def streamed_bytes(weights: dict[str, object]) -> int:
    """Weight bytes one decode step reads: every parameter but the input embedding (a row gather);
    a quantized weight counts its packed bytes and its scales (torchao's Int4OpaqueTensor: qdata, scale_and_zero)."""
    def size(w: object) -> int:
        return w.qdata.nbytes + w.scale_and_zero.nbytes if hasattr(w, "qdata") else w.nbytes
    return sum(size(w) for name, w in weights.items() if name != "model.embed_tokens.weight")


@dataclass(frozen=True)
class Int8Weight:
    """A weight quantized per output channel, symmetric: w[j] = q[j] * scales[j] (aten._weight_int8pack_mm)."""

    q: torch.Tensor  # [n, k] int8
    scales: torch.Tensor  # [n], of the activations' dtype

    @classmethod
    def quantize(cls, w: torch.Tensor, dtype: torch.dtype) -> tuple["Int8Weight", torch.Tensor]:
        """The weight, and the float32 weight it stands for."""
        scales = (w.abs().amax(1) / 127).clamp(min=1e-8).to(dtype)
        q = (w / scales.float()[:, None]).round().clamp(-128, 127).to(torch.int8)
        return cls(q, scales), q.float() * scales.float()[:, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x, self.q, self.scales)

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scales.nbytes


@dataclass(frozen=True)
class Int4Weight:
    """A weight quantized in groups of `group` along k, asymmetric (torchao's tinygemm form):
    w = (q - 8) * scale + zero, q in 0..15, packed by aten._convert_weight_to_int4pack_for_cpu."""

    packed: torch.Tensor  # uint8, torch's CPU layout
    group: int
    scales_zeros: torch.Tensor  # [k / group, n, 2], of the activations' dtype
    shape: tuple[int, int]

    @classmethod
    def quantize(cls, w: torch.Tensor, dtype: torch.dtype, group: int) -> tuple["Int4Weight", torch.Tensor]:
        """The weight, and the float32 weight it stands for."""
        n, k = w.shape
        grouped = w.reshape(n, k // group, group)
        low, high = grouped.amin(-1, keepdim=True), grouped.amax(-1, keepdim=True)
        scale = ((high - low) / 15).clamp(min=1e-8)
        q = ((grouped - low) / scale).round().clamp(0, 15)
        zero = low + 8 * scale  # (q - 8) * scale + zero = q * scale + low
        scale, zero = scale.to(dtype).float(), zero.to(dtype).float()  # what the kernels read
        scales_zeros = torch.stack([scale[..., 0].t(), zero[..., 0].t()], -1).to(dtype).contiguous()
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).reshape(n, k), 1)
        return cls(packed, group, scales_zeros, (n, k)), ((q - 8) * scale + zero).reshape(n, k)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, self.group, self.scales_zeros)

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales_zeros.nbytes


def quantize(state: dict[str, torch.Tensor], quant: str, dtype: torch.dtype, group: int = 128,
             torchao: bool = False) -> tuple[dict[str, object], dict[str, torch.Tensor]]:
    """(weights for Llama, their float32 values): every matrix but the input embedding as
    Int8Weight / Int4Weight (quant "int8" / "int4"; int4 through torchao's quantize_ with `torchao`),
    the rest as `dtype` tensors."""
    weights, reference = {}, {}
    for name, t in state.items():
        if t.dim() != 2 or name == "model.embed_tokens.weight":
            weights[name] = t.to(dtype)
            reference[name] = weights[name].float()
        elif quant == "int8":
            weights[name], reference[name] = Int8Weight.quantize(t, dtype)
        elif torchao:
            weights[name], reference[name] = torchao_int4(t, dtype, group)
        else:
            weights[name], reference[name] = Int4Weight.quantize(t, dtype, group)
    return weights, reference


def torchao_int4(w: torch.Tensor, dtype: torch.dtype, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torchao's int4 weight-only CPU layout (Int4OpaqueTensor: F.linear calls
    aten._weight_int4pack_mm_for_cpu), and the float32 weight it stands for (read back through the
    op, as the product of an identity)."""
    from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig
    from torchao.quantization import quantize_

    layer = nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=dtype)
    layer.weight.data.copy_(w)
    quantize_(layer, PrototypeInt4WeightOnlyConfig(group_size=group))
    q = layer.weight
    eye = torch.eye(w.shape[1])
    dense = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, q.qdata, group, q.scale_and_zero.float())
    return q, dense.t().contiguous()


def linear(x: torch.Tensor, w: object) -> torch.Tensor:
    """F.linear, or the quantized product of a weight from quantize() (2-D in, as the ops take it)."""
    if isinstance(w, torch.Tensor):
        return F.linear(x, w)
    return w(x.reshape(-1, x.shape[-1])).view(*x.shape[:-1], -1)


class Llama(nn.Module):
    def __init__(self, config: Config, weights: dict[str, object], dtype: torch.dtype, max_len: int,
                 batch: int) -> None:
        """weights: `dtype` tensors, or quantize()'s weights (quantized matrices, `dtype` for the rest)."""
        super().__init__()
        self.config = config
        self.weights = weights
        inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, config.head_dim, 2).float() / config.head_dim)
        angles = torch.outer(torch.arange(max_len).float(), inv_freq).repeat(1, 2)
        self.cos, self.sin = angles.cos().to(dtype), angles.sin().to(dtype)
        shape = (batch, config.kv_heads, max_len, config.head_dim)
        self.cache = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in range(config.layers)]

    def forward(self, tokens: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """Logits of the last position for tokens [batch, n] at positions start..start+n-1, caching K and V."""
        c, w = self.config, self.weights
        batch, n = tokens.shape
        positions = start + torch.arange(n)
        cos, sin = self.cos[positions], self.sin[positions]
        # Query i sees cache slots up to its own position (the rest of the static cache is masked).
        mask = torch.arange(self.cos.shape[0]) <= positions[:, None]
        x = F.embedding(tokens, w["model.embed_tokens.weight"])
        for i, (k_cache, v_cache) in enumerate(self.cache):
            p = f"model.layers.{i}."
            h = F.rms_norm(x, (c.hidden,), w[p + "input_layernorm.weight"], c.eps)
            q = linear(h, w[p + "self_attn.q_proj.weight"]).view(batch, n, c.heads, c.head_dim).transpose(1, 2)
            k = linear(h, w[p + "self_attn.k_proj.weight"]).view(batch, n, c.kv_heads, c.head_dim).transpose(1, 2)
            v = linear(h, w[p + "self_attn.v_proj.weight"]).view(batch, n, c.kv_heads, c.head_dim).transpose(1, 2)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            k_cache.index_copy_(2, positions, k)
            v_cache.index_copy_(2, positions, v)
            attn = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask, enable_gqa=True)
            x = x + linear(attn.transpose(1, 2).reshape(batch, n, c.hidden), w[p + "self_attn.o_proj.weight"])
            h = F.rms_norm(x, (c.hidden,), w[p + "post_attention_layernorm.weight"], c.eps)
            gated = F.silu(linear(h, w[p + "mlp.gate_proj.weight"])) * linear(h, w[p + "mlp.up_proj.weight"])
            x = x + linear(gated, w[p + "mlp.down_proj.weight"])
        x = F.rms_norm(x[:, -1], (c.hidden,), w["model.norm.weight"], c.eps)
        return linear(x, w["lm_head.weight"])


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def hf_model(config: Config, state: dict[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    """The same weights in HF transformers' LlamaForCausalLM (built from a config: nothing downloaded)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_config = LlamaConfig(vocab_size=config.vocab, hidden_size=config.hidden, intermediate_size=config.intermediate,
                            num_hidden_layers=config.layers, num_attention_heads=config.heads,
                            num_key_value_heads=config.kv_heads, rms_norm_eps=config.eps, rope_theta=config.rope_theta,
                            tie_word_embeddings=False, max_position_embeddings=4096)
    model = LlamaForCausalLM(hf_config).to(dtype).eval()
    model.load_state_dict({name: t.to(dtype) for name, t in state.items()})
    return model
