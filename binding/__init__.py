"""torchplug's binding of a device runtime to torch: what lies between the device-runtime contract
(torchplug.entrypoints.device_runtime, include/torchplug/device_runtime.h) and torch, written once.

A plugin whose Backend is a `RuntimeBackend` gets, with no code of its own: the allocator, the device
guard (streams, events), the PrivateUse1 hooks, copies each way through the runtime, empty/resize_/
set_ and the view ops, `torch.<name>` with torch.cuda's names, storages and torch.load's
map_location, and torchplug's governed CPU fallback for every other op, staging through the
runtime's copies. The C++ (csrc/) is built on first device use, never at ``import torch``.
"""
