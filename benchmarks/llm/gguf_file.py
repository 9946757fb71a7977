"""The decoder's weights as a GGUF file that llama.cpp loads (written with the `gguf` package): F16, or
Q8_0 / Q4_0 through gguf-py's own quantizers.

The tokenizer is a placeholder vocabulary of `vocab` tokens: the benchmark feeds token ids, never text.
Q and K rows are permuted from HF's rotate-half rotary layout to GGUF's interleaved one, as
llama.cpp's own converter does, so the file is the same model, not only the same sizes.
"""

from pathlib import Path

import numpy as np
import torch

from .model import Config

NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_name(hf_name: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf_name in top:
        return top[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    module = rest.removesuffix(".weight")
    return f"blk.{layer}.{NAMES[module]}.weight"


def permute_rotary(weight: torch.Tensor, heads: int) -> torch.Tensor:
    rows, cols = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def quantized(array: np.ndarray, qtype: str) -> np.ndarray:
    """gguf-py's quantizer: a float32 matrix as `qtype` ("Q8_0", "Q4_0") blocks of 32 along a row."""
    import gguf

    return gguf.quants.quantize(array.astype(np.float32), gguf.GGMLQuantizationType[qtype])


def round_trip(state: dict[str, torch.Tensor], qtype: str) -> dict[str, torch.Tensor]:
    """The float32 weights llama.cpp computes with in a `qtype` file: every matrix quantized by gguf-py
    and dequantized (blocks lie along a row, so the rotary row permutation commutes with it)."""
    import gguf

    return {name: torch.from_numpy(gguf.quants.dequantize(quantized(t.numpy(), qtype), gguf.GGMLQuantizationType[qtype]))
            if t.dim() == 2 else t
            for name, t in state.items()}


def write(path: Path, config: Config, state: dict[str, torch.Tensor], qtype: str = "F16") -> Path:
    """The GGUF file; qtype "F16", or "Q8_0" / "Q4_0" for every matrix (gguf-py's quantizers)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("torchplug-benchmark-llama")
    writer.add_context_length(4096)
    writer.add_embedding_length(config.hidden)
    writer.add_block_count(config.layers)
    writer.add_feed_forward_length(config.intermediate)
    writer.add_head_count(config.heads)
    writer.add_head_count_kv(config.kv_heads)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.eps)
    writer.add_vocab_size(config.vocab)
    writer.add_file_type(getattr(gguf.LlamaFileType, f"MOSTLY_{qtype}"))
    writer.add_tokenizer_model("llama")
    writer.add_token_list([b"<unk>", b"<s>", b"</s>", *(f"t{i}".encode() for i in range(3, config.vocab))])
    writer.add_token_scores([0.0] * config.vocab)
    writer.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
                           + [gguf.TokenType.NORMAL] * (config.vocab - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for name, tensor in state.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config.heads if "q_proj" in name else config.kv_heads
            tensor = permute_rotary(tensor, heads)
        # llama.cpp keeps norms in F32, matrices in F16 (what an F16 conversion writes) or qtype.
        if tensor.dim() == 1:
            writer.add_tensor(gguf_name(name), tensor.numpy().astype(np.float32))
        elif qtype == "F16":
            writer.add_tensor(gguf_name(name), tensor.numpy().astype(np.float16))
        else:
            writer.add_tensor(gguf_name(name), quantized(tensor.numpy(), qtype), raw_dtype=gguf.GGMLQuantizationType[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
