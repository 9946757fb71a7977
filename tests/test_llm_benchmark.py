"""benchmarks/llm: the decoder it times computes a real Llama (the KV cache, compiled or not, gives
what a full forward gives), and its GGUF copy is the same model in llama.cpp's names and layout."""

import sys

import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from llm import gguf_file  # noqa: E402
from llm.model import PRESETS, Llama, quantize, random_state, streamed_bytes  # noqa: E402

CONFIG = PRESETS["tiny"]


def decode_logits(step, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Logits after each position, fed one token at a time through the cache."""
    return [step(tokens[:, i:i + 1], torch.tensor(i)) for i in range(tokens.shape[1])]


@pytest.mark.parametrize("compiled", [False, True])
def test_cached_decode_matches_a_full_forward_at_every_position(compiled):
    state = random_state(CONFIG)
    tokens = torch.randint(0, CONFIG.vocab, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        model = Llama(CONFIG, state, torch.float32, max_len=8, batch=2)
        step = torch.compile(model, dynamic=False) if compiled else model
        cached = decode_logits(step, tokens)
        for n in range(1, tokens.shape[1] + 1):
            full = Llama(CONFIG, state, torch.float32, max_len=8, batch=2)(tokens[:, :n], torch.tensor(0))
            torch.testing.assert_close(cached[n - 1], full, rtol=1e-4, atol=1e-5)


def test_streamed_bytes_leave_out_only_the_input_embedding():
    state = random_state(CONFIG)
    total = sum(t.numel() for t in state.values())
    assert streamed_bytes({name: t.half() for name, t in state.items()}) == 2 * (total - CONFIG.vocab * CONFIG.hidden)


def test_the_gguf_file_holds_every_weight_in_llama_cpp_names_and_layout(tmp_path):
    gguf = pytest.importorskip("gguf")
    state = random_state(CONFIG)
    reader = gguf.GGUFReader(gguf_file.write(tmp_path / "m.gguf", CONFIG, state))
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == {gguf_file.gguf_name(name) for name in state}
    assert reader.fields["llama.block_count"].parts[-1][0] == CONFIG.layers
    q = torch.from_numpy(tensors["blk.0.attn_q.weight"].data.copy()).float()
    assert tensors["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    # Q rows go from HF's rotate-half order to GGUF's interleaved one; V rows stay as they are.
    expected_q = gguf_file.permute_rotary(state["model.layers.0.self_attn.q_proj.weight"], CONFIG.heads)
    torch.testing.assert_close(q, expected_q.half().float())
    v = torch.from_numpy(tensors["blk.0.attn_v.weight"].data.copy()).float()
    torch.testing.assert_close(v, state["model.layers.0.self_attn.v_proj.weight"].half().float())


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_a_quantized_decoder_computes_what_its_dequantized_weights_do(quant):
    """--quant: every matrix but the embedding becomes a weight-only int8 / int4 product, and
    quantize()'s float32 weights (the logits' reference) are what those products multiply by."""
    state = random_state(CONFIG)
    weights, reference = quantize(state, quant, torch.float32, group=64)
    tokens = torch.randint(0, CONFIG.vocab, (1, 5), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        got = Llama(CONFIG, weights, torch.float32, 8, 1)(tokens, torch.tensor(0))
        want = Llama(CONFIG, reference, torch.float32, 8, 1)(tokens, torch.tensor(0))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    matrices = sum(t.numel() for name, t in state.items() if t.dim() == 2 and name != "model.embed_tokens.weight")
    assert streamed_bytes(weights) < matrices * (1.1 if quant == "int8" else 0.65)  # int4: + fp32 scales, zeros


def test_a_quantized_gguf_file_holds_gguf_pys_blocks(tmp_path):
    gguf = pytest.importorskip("gguf")
    state = random_state(CONFIG)
    reader = gguf.GGUFReader(gguf_file.write(tmp_path / "m.gguf", CONFIG, state, "Q8_0"))
    tensors = {t.name: t for t in reader.tensors}
    assert tensors["blk.0.attn_v.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    v = gguf.quants.dequantize(tensors["blk.0.attn_v.weight"].data, gguf.GGMLQuantizationType.Q8_0)
    expected = gguf_file.round_trip(state, "Q8_0")["model.layers.0.self_attn.v_proj.weight"]
    torch.testing.assert_close(torch.from_numpy(v.copy()).float().reshape(expected.shape), expected)


def test_rotary_permutation_interleaves_each_heads_halves():
    weight = torch.arange(8.0)[:, None]  # one head of dim 8: rows 0-3 are the first half, 4-7 the second
    assert gguf_file.permute_rotary(weight, heads=1).flatten().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
