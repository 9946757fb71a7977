"""torch's own device-generic test harness runs a test class of ours on emulated cuda and xpu.

PyTorch's test files (test_ops.py, test_nn.py, ...) are TestCases that
torch.testing._internal.common_device_type instantiates once per available device type. On CUDA
that harness does more than on other devices: it runs each test on a non-default stream through
torch._C._cuda_setStream and _cuda_setDevice, can check each test for leaked device memory, and
reads the GPU's capability, cuDNN, memory and device count for its decorators. Whoever runs
PyTorch-style tests on emulated cuda depends on all of it, so every run of this suite takes
tests/device_generic_cases.py through it, in a fresh process per device type, and checks each
test's outcome: a test that fails, errors, or is skipped for another reason fails here.
"""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import clean_env, run_process

CASES = Path(__file__).with_name("device_generic_cases.py")
SETTINGS = {"TORCHPLUG_EMULATE_DEVICES": "2", "TORCHPLUG_EMULATE_MEMORY": "2GiB", "PYTORCH_TEST_CUDA_MEM_LEAK_CHECK": "1"}
OPS = ("add", "matmul", "softmax", "sum", "nn_functional_layer_norm")

PASSED = ("passed", "")


def expected(device: str) -> dict[str, tuple[str, str]]:
    """Each instantiated test's outcome on the emulated `device`, with a fragment of the skip reason."""
    cuda = device == "cuda"
    only = ("skipped", "Only runs on cuda")
    dtypes = ("float32", "float16", "bfloat16") if cuda else ("float32", "float64")
    outcomes = {
        **{f"test_matmul_matches_cpu_{device}_{dtype}": PASSED for dtype in dtypes},  # @dtypesIfCUDA on cuda
        **{f"test_op_matches_cpu_{op}_{device}_float32": PASSED for op in OPS},  # @ops
        "test_cuda_tests_run_on_a_non_default_stream": PASSED if cuda else only,  # CudaNonDefaultStream
        "test_xpu_tests_keep_the_default_stream": ("skipped", "Only runs on xpu") if cuda else PASSED,
        "test_the_device_generator_is_seeded_before_each_test": PASSED,
        "test_copies_between_devices": PASSED,  # @deviceCountAtLeast(2) with two devices
        "test_needs_three_devices": ("skipped", "fewer than 3 devices detected"),
        "test_a_large_tensor_fits": PASSED,  # @largeTensorTest reads the free memory of a 2 GiB device
        "test_a_tensor_larger_than_the_device_is_skipped": ("skipped", f"Insufficient {device}:0 memory"),
        "test_convolution_without_cudnn": ("skipped", "cuDNN not available") if cuda else PASSED,
        "test_bf16_autocast_on_ampere": PASSED if cuda else ("skipped", ""),  # SM80OrLater: an A100 by default
        "test_a_leak_is_caught": ("xfailed", "") if cuda else only,  # CudaMemoryLeakCheck raises
    }
    return {name if name.endswith(dtypes) else f"{name}_{device}": outcome for name, outcome in outcomes.items()}


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """Each test in a pytest JUnit report: passed, skipped, xfailed, failure or error, and its message."""
    found = {}
    for case in ET.parse(junit).iter("testcase"):
        verdicts = [child for child in case if child.tag in ("failure", "error", "skipped")]
        if not verdicts:
            found[case.get("name")] = PASSED
            continue
        verdict = verdicts[0]
        kind = verdict.tag if verdict.tag != "skipped" or verdict.get("type") != "pytest.xfail" else "xfailed"
        found[case.get("name")] = (kind, verdict.get("message") or "")
    return found


@pytest.mark.parametrize("device", ["cuda", "xpu"])
def test_torchs_harness_runs_our_device_generic_class(device, tmp_path):
    junit = tmp_path / "junit.xml"
    result = run_process([sys.executable, "-m", "pytest", CASES, "-q", "-p", "no:cacheprovider", "--noconftest",
                          f"--junitxml={junit}"], check=False, cwd=tmp_path,
                         env=clean_env(TORCHPLUG_EMULATE=device, **SETTINGS))
    assert junit.exists(), f"pytest wrote no report:\n{result.stdout}\n{result.stderr}"
    found, wanted = outcomes(junit), expected(device)
    wrong = {name: found.get(name, ("not run", "")) for name, (kind, reason) in wanted.items()
             if name not in found or found[name][0] != kind or reason not in found[name][1]}
    unexpected = sorted(set(found) - set(wanted))
    assert not wrong and not unexpected, (
        f"torch's harness on emulated {device}: outcomes that differ {wrong}, tests not expected {unexpected}\n"
        f"{result.stdout[-6000:]}")
