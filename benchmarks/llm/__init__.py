"""Helpers of benchmarks/llm_cpu.py: a Llama-architecture decoder (model.py) and its F16 GGUF copy for llama.cpp (gguf_file.py)."""
