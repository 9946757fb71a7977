#include "dispatch.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  torchplug::bind_dtype_split(m);
  torchplug::bind_governed_fallback(m);
}
