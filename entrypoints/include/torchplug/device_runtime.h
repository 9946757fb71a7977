/* torchplug's device-runtime contract, version 1: the plain C ABI a device's driver implements.
 *
 * A vendor's shared library exports one function,
 *
 *     const torchplug_device_runtime* torchplug_device_runtime_v1(void);
 *
 * returning a table of function pointers that lives as long as the process. torchplug turns any such
 * table into a torch device (allocator, device guard, streams, events, copies, the CPU fallback,
 * torch.<name>, storages, serialization); the table is all it knows about the device. Nothing here
 * needs torch or C++: the library builds with `gcc -shared -fPIC` alone.
 *
 * Rules every entry follows:
 *   - It returns TORCHPLUG_SUCCESS, or an error code with `last_error()` describing the failure on the
 *     calling thread (torchplug raises it as the Python error, naming the plugin and the call).
 *   - Device memory need not be readable by the host: torchplug reads and writes it only through
 *     `memcpy`, `memcpy_async`, `memset` and `launch_host`.
 *   - A stream handle of NULL means the default stream of the calling thread's current device
 *     (set_device), in every entry that takes one; `memcpy` is synchronous with respect to the host
 *     and ordered after work already queued on the default stream of the device it touches.
 *   - Optional entries may be NULL (marked "optional"); torchplug then says, when it is asked for,
 *     that the device lacks it.
 *
 * Versioning: `abi_version` is TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION of the header the library was
 * built with and `struct_size` is sizeof(torchplug_device_runtime) there. torchplug refuses a table
 * with another major version, or one smaller than the version-1 table, naming the plugin and both
 * numbers; later minor additions only append fields, so a larger table from a newer header loads.
 */
#ifndef TORCHPLUG_DEVICE_RUNTIME_H
#define TORCHPLUG_DEVICE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION 1
#define TORCHPLUG_DEVICE_RUNTIME_SYMBOL "torchplug_device_runtime_v1"

typedef enum torchplug_status {
  TORCHPLUG_SUCCESS = 0,
  TORCHPLUG_ERROR_INVALID_DEVICE = 1, /* no device with that index */
  TORCHPLUG_ERROR_OUT_OF_MEMORY = 2,  /* torch raises torch.OutOfMemoryError for it */
  TORCHPLUG_ERROR_INVALID_VALUE = 3,  /* a bad pointer, size or handle */
  TORCHPLUG_ERROR_NOT_READY = 4,      /* stream_query / event_query: work still pending (not a failure) */
  TORCHPLUG_ERROR_UNSUPPORTED = 5,    /* the device cannot do this */
  TORCHPLUG_ERROR_INTERNAL = 6        /* anything else; last_error() says what */
} torchplug_status;

typedef enum torchplug_memcpy_kind {
  TORCHPLUG_HOST_TO_DEVICE = 0,
  TORCHPLUG_DEVICE_TO_HOST = 1,
  TORCHPLUG_DEVICE_TO_DEVICE = 2
} torchplug_memcpy_kind;

typedef struct torchplug_stream_s* torchplug_stream; /* opaque; NULL is the default stream */
typedef struct torchplug_event_s* torchplug_event;   /* opaque */

/* What torch.<name>.get_device_properties() reports. */
typedef struct torchplug_device_properties {
  char name[256];
  uint64_t total_memory; /* bytes */
  int32_t multi_processor_count;
  int32_t major; /* compute capability, or 0 */
  int32_t minor;
  int32_t warp_size;
} torchplug_device_properties;

/* A host function run by `launch_host` while the device memory it works on is accessible to it. */
typedef void (*torchplug_host_kernel)(void* arguments);

typedef struct torchplug_device_runtime {
  uint32_t abi_version; /* TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION */
  uint32_t struct_size; /* sizeof(torchplug_device_runtime) */
  const char* name;     /* the runtime's own name, for messages, e.g. "example-device 0.1" */

  /* Error text for the last failing call on this thread; never NULL. */
  const char* (*last_error)(void);

  /* Devices. The current device is per host thread and starts at 0. */
  torchplug_status (*device_count)(int32_t* count);
  torchplug_status (*set_device)(int32_t device);
  torchplug_status (*get_device)(int32_t* device);
  torchplug_status (*get_device_properties)(int32_t device, torchplug_device_properties* properties);
  torchplug_status (*synchronize)(int32_t device); /* wait for every stream of the device */

  /* Device memory. malloc of 0 bytes may return NULL. free and host_free may be called while work that
   * uses the memory is still queued: the runtime waits for it or defers the release (as cudaFree and
   * cudaFreeHost do). torchplug queues its copies with memcpy_async on torch's current stream of the
   * device (then stream_synchronize unless the copy may finish later: one on the device, or one with
   * pinned host memory that torch asked for with non_blocking=True); memcpy is for callers without a
   * stream. */
  torchplug_status (*malloc)(int32_t device, size_t nbytes, void** pointer);
  torchplug_status (*free)(int32_t device, void* pointer);
  torchplug_status (*memcpy)(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind);
  torchplug_status (*memcpy_async)(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind,
                                   torchplug_stream stream);
  torchplug_status (*memset)(void* destination, int value, size_t nbytes);

  /* Pinned (page-locked) host memory, for asynchronous copies. */
  torchplug_status (*host_malloc)(size_t nbytes, void** pointer);
  torchplug_status (*host_free)(void* pointer);

  /* Streams, created on the current device. */
  torchplug_status (*stream_create)(torchplug_stream* stream, int32_t priority);
  torchplug_status (*stream_destroy)(torchplug_stream stream);
  torchplug_status (*stream_synchronize)(torchplug_stream stream);
  torchplug_status (*stream_query)(torchplug_stream stream); /* SUCCESS when idle, else NOT_READY */
  torchplug_status (*stream_wait_event)(torchplug_stream stream, torchplug_event event);

  /* Events, created on the current device. */
  torchplug_status (*event_create)(torchplug_event* event, int32_t enable_timing);
  torchplug_status (*event_destroy)(torchplug_event event);
  torchplug_status (*event_record)(torchplug_event event, torchplug_stream stream);
  torchplug_status (*event_query)(torchplug_event event); /* SUCCESS when reached, else NOT_READY */
  torchplug_status (*event_synchronize)(torchplug_event event);
  torchplug_status (*event_elapsed_time)(float* milliseconds, torchplug_event start, torchplug_event end);

  /* Optional: run `kernel(arguments)` on the host with the device memory it reads accessible to it,
   * ordered on `stream` and finished when it returns. A device whose memory the host can map offers it
   * so that host-compiled code (torch.compile's C++ target) can run on device tensors. torchplug never
   * calls it from inside a kernel it runs, nor calls another entry there: it need not be re-entrant. */
  torchplug_status (*launch_host)(int32_t device, torchplug_stream stream, torchplug_host_kernel kernel,
                                  void* arguments);
} torchplug_device_runtime;

/* The one symbol a runtime library exports. */
typedef const torchplug_device_runtime* (*torchplug_device_runtime_entry)(void);

#ifdef __cplusplus
}
#endif

#endif /* TORCHPLUG_DEVICE_RUNTIME_H */
