/* The example device's runtime: torchplug's device-runtime contract (torchplug/device_runtime.h) in
 * plain C, for a device whose memory the host cannot read.
 *
 * Device memory is host pages mapped PROT_NONE: the host faults (SIGSEGV) on any access, except
 * while this runtime copies into or out of them, or runs a host kernel on them (launch_host). That
 * makes any code that reads a device pointer directly crash at once, as on a real accelerator, where
 * it would read garbage.
 *
 * Streams are lazy, to show what ordering torchplug relies on: memcpy_async only queues the copy on
 * its stream, and the queue runs at the latest moment a real device could have finished it (a
 * synchronization, an event record, a launch or a synchronous copy on that stream, a free). Code that
 * reads the destination of an asynchronous copy without waiting for its stream sees the old bytes.
 *
 * Build: gcc -shared -fPIC -O2 -I$(python -c "import torchplug.entrypoints.device_runtime as r; print(r.include_dir())") runtime.c
 */
#include <torchplug/device_runtime.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define DEVICE_COUNT 2
#define DEVICE_MEMORY (8ull << 30) /* bytes per device */

typedef struct block {
  char* data;
  size_t mapped; /* whole pages */
  int32_t device;
  struct block* next;
} block;

typedef struct queued_copy { /* a memcpy_async not run yet */
  void* destination;
  const void* source;
  size_t nbytes;
  torchplug_memcpy_kind kind;
  struct queued_copy* next;
} queued_copy;

struct torchplug_stream_s {
  int32_t device;
  queued_copy* first; /* the queue, oldest first */
  queued_copy** last;
  struct torchplug_stream_s* next; /* every created stream */
};
struct torchplug_event_s {
  int32_t device;
  int32_t timing;
  int32_t recorded;
  double milliseconds; /* CLOCK_MONOTONIC when recorded */
};

/* The block list, page protection changes, and the streams' queues. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block* blocks = NULL;
static struct torchplug_stream_s default_streams[DEVICE_COUNT]; /* the NULL stream of each device */
static torchplug_stream created_streams = NULL;
static uint64_t in_use[DEVICE_COUNT];
static __thread int32_t current = 0;
static __thread char error[512] = "";

static torchplug_status fail(torchplug_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(error, sizeof(error), format, args);
  va_end(args);
  return status;
}

static size_t page_size(void) {
  static size_t size = 0;
  if (size == 0) size = (size_t)sysconf(_SC_PAGESIZE);
  return size;
}

static int valid_device(int32_t device) { return device >= 0 && device < DEVICE_COUNT; }

/* The block holding [pointer, pointer + nbytes), or NULL. Called with the lock held. */
static block* find(const void* pointer, size_t nbytes) {
  const char* p = (const char*)pointer;
  for (block* b = blocks; b != NULL; b = b->next) {
    if (p >= b->data && p + nbytes <= b->data + b->mapped) return b;
  }
  return NULL;
}

/* Open (or close again) the pages of [pointer, pointer + nbytes) to the host. */
static void open_pages(const void* pointer, size_t nbytes, int open) {
  uintptr_t first = (uintptr_t)pointer & ~(uintptr_t)(page_size() - 1);
  uintptr_t end = ((uintptr_t)pointer + nbytes + page_size() - 1) & ~(uintptr_t)(page_size() - 1);
  mprotect((void*)first, end - first, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

/* Checks that the device side of a copy lies inside device blocks; returns the device-side block. */
static block* device_side(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind) {
  const int reads_device = kind == TORCHPLUG_DEVICE_TO_HOST || kind == TORCHPLUG_DEVICE_TO_DEVICE;
  const int writes_device = kind == TORCHPLUG_HOST_TO_DEVICE || kind == TORCHPLUG_DEVICE_TO_DEVICE;
  block* read = reads_device ? find(source, nbytes) : NULL;
  block* written = writes_device ? find(destination, nbytes) : NULL;
  if ((reads_device && read == NULL) || (writes_device && written == NULL)) return NULL;
  return written != NULL ? written : read;
}

/* Runs one copy already checked by device_side(). Called with the lock held. */
static void run_copy(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind) {
  const int reads_device = kind == TORCHPLUG_DEVICE_TO_HOST || kind == TORCHPLUG_DEVICE_TO_DEVICE;
  const int writes_device = kind == TORCHPLUG_HOST_TO_DEVICE || kind == TORCHPLUG_DEVICE_TO_DEVICE;
  if (reads_device) open_pages(source, nbytes, 1);
  if (writes_device) open_pages(destination, nbytes, 1);
  memmove(destination, source, nbytes);
  if (reads_device) open_pages(source, nbytes, 0);
  if (writes_device) open_pages(destination, nbytes, 0);
}

/* The stream a handle names: NULL is the default stream of `device` (always a valid index, since
 * set_device refuses others; checked anyway, so that no bug can index past the array). */
static torchplug_stream resolve(torchplug_stream stream, int32_t device) {
  return stream != NULL ? stream : &default_streams[valid_device(device) ? device : 0];
}

/* Runs the copies queued on `stream`, in order; returns whether there were any. Lock held. */
static int flush(torchplug_stream stream) {
  const int any = stream->first != NULL;
  while (stream->first != NULL) {
    queued_copy* c = stream->first;
    run_copy(c->destination, c->source, c->nbytes, c->kind);
    stream->first = c->next;
    free(c);
  }
  stream->last = &stream->first;
  return any;
}

/* Runs every queued copy of `device` (-1: of every device). Lock held. */
static void flush_device(int32_t device) {
  for (int32_t d = 0; d < DEVICE_COUNT; ++d) {
    if (device < 0 || d == device) flush(&default_streams[d]);
  }
  for (torchplug_stream s = created_streams; s != NULL; s = s->next) {
    if (device < 0 || s->device == device) flush(s);
  }
}

static const char* last_error(void) { return error; }

static torchplug_status device_count(int32_t* count) {
  *count = DEVICE_COUNT;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status set_device(int32_t device) {
  if (!valid_device(device)) return fail(TORCHPLUG_ERROR_INVALID_DEVICE, "invalid device ordinal %d (%d devices)", device, DEVICE_COUNT);
  current = device;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status get_device(int32_t* device) {
  *device = current;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status get_device_properties(int32_t device, torchplug_device_properties* properties) {
  if (!valid_device(device)) return fail(TORCHPLUG_ERROR_INVALID_DEVICE, "invalid device ordinal %d", device);
  memset(properties, 0, sizeof(*properties));
  snprintf(properties->name, sizeof(properties->name), "torchplug example device %d (protected host pages)", device);
  properties->total_memory = DEVICE_MEMORY;
  properties->multi_processor_count = 1;
  properties->warp_size = 1;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status synchronize(int32_t device) {
  if (!valid_device(device)) return fail(TORCHPLUG_ERROR_INVALID_DEVICE, "invalid device ordinal %d", device);
  pthread_mutex_lock(&lock);
  flush_device(device);
  pthread_mutex_unlock(&lock);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status device_malloc(int32_t device, size_t nbytes, void** pointer) {
  *pointer = NULL;
  if (!valid_device(device)) return fail(TORCHPLUG_ERROR_INVALID_DEVICE, "invalid device ordinal %d", device);
  if (nbytes == 0) return TORCHPLUG_SUCCESS;
  size_t mapped = (nbytes + page_size() - 1) & ~(page_size() - 1);
  pthread_mutex_lock(&lock);
  if (in_use[device] + mapped > DEVICE_MEMORY) {
    uint64_t used = in_use[device];
    pthread_mutex_unlock(&lock);
    return fail(TORCHPLUG_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes on device %d: %llu of %llu bytes in use",
                nbytes, device, (unsigned long long)used, (unsigned long long)DEVICE_MEMORY);
  }
  void* data = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  block* b = data == MAP_FAILED ? NULL : malloc(sizeof(block));
  if (b == NULL) {
    if (data != MAP_FAILED) munmap(data, mapped);
    pthread_mutex_unlock(&lock);
    return fail(TORCHPLUG_ERROR_OUT_OF_MEMORY, "mmap of %zu bytes failed on device %d", mapped, device);
  }
  *b = (block){(char*)data, mapped, device, blocks};
  blocks = b;
  in_use[device] += mapped;
  pthread_mutex_unlock(&lock);
  *pointer = data;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status device_free(int32_t device, void* pointer) {
  if (pointer == NULL) return TORCHPLUG_SUCCESS;
  pthread_mutex_lock(&lock);
  flush_device(-1); /* queued copies may still use the block (on any device's stream), as on a GPU */
  for (block** link = &blocks; *link != NULL; link = &(*link)->next) {
    block* b = *link;
    if (b->data == pointer) {
      *link = b->next;
      in_use[b->device] -= b->mapped;
      munmap(b->data, b->mapped);
      free(b);
      pthread_mutex_unlock(&lock);
      return TORCHPLUG_SUCCESS;
    }
  }
  pthread_mutex_unlock(&lock);
  return fail(TORCHPLUG_ERROR_INVALID_VALUE, "free(%p) on device %d: not a block of this runtime", pointer, device);
}

static torchplug_status bad_copy(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind) {
  return fail(TORCHPLUG_ERROR_INVALID_VALUE, "memcpy of %zu bytes from %p to %p (kind %d): the device side is not "
              "inside one device block", nbytes, source, destination, (int)kind);
}

static torchplug_status copy(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind) {
  if (nbytes == 0) return TORCHPLUG_SUCCESS;
  if (kind < TORCHPLUG_HOST_TO_DEVICE || kind > TORCHPLUG_DEVICE_TO_DEVICE) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "memcpy: unknown kind %d", (int)kind);
  }
  pthread_mutex_lock(&lock);
  block* b = device_side(destination, source, nbytes, kind);
  if (b == NULL) {
    pthread_mutex_unlock(&lock);
    return bad_copy(destination, source, nbytes, kind);
  }
  flush(&default_streams[b->device]); /* ordered after the default stream's work */
  run_copy(destination, source, nbytes, kind);
  pthread_mutex_unlock(&lock);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status copy_async(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind,
                                   torchplug_stream stream) {
  if (nbytes == 0) return TORCHPLUG_SUCCESS;
  if (kind < TORCHPLUG_HOST_TO_DEVICE || kind > TORCHPLUG_DEVICE_TO_DEVICE) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "memcpy_async: unknown kind %d", (int)kind);
  }
  queued_copy* c = malloc(sizeof(queued_copy));
  if (c == NULL) return fail(TORCHPLUG_ERROR_OUT_OF_MEMORY, "memcpy_async: out of host memory");
  *c = (queued_copy){destination, source, nbytes, kind, NULL};
  pthread_mutex_lock(&lock);
  block* b = device_side(destination, source, nbytes, kind);
  if (b == NULL) {
    pthread_mutex_unlock(&lock);
    free(c);
    return bad_copy(destination, source, nbytes, kind);
  }
  stream = resolve(stream, current);
  if (stream->last == NULL) stream->last = &stream->first; /* a default stream's first use */
  *stream->last = c;
  stream->last = &c->next;
  pthread_mutex_unlock(&lock);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status device_memset(void* destination, int value, size_t nbytes) {
  if (nbytes == 0) return TORCHPLUG_SUCCESS;
  pthread_mutex_lock(&lock);
  if (find(destination, nbytes) == NULL) {
    pthread_mutex_unlock(&lock);
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "memset of %zu bytes at %p: not inside one device block", nbytes, destination);
  }
  flush(&default_streams[find(destination, nbytes)->device]); /* ordered after the default stream's work */
  open_pages(destination, nbytes, 1);
  memset(destination, value, nbytes);
  open_pages(destination, nbytes, 0);
  pthread_mutex_unlock(&lock);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status host_malloc(size_t nbytes, void** pointer) {
  /* Host memory is always accessible here; a real device would page-lock it for DMA. */
  *pointer = nbytes == 0 ? NULL : malloc(nbytes);
  if (nbytes != 0 && *pointer == NULL) return fail(TORCHPLUG_ERROR_OUT_OF_MEMORY, "host_malloc of %zu bytes failed", nbytes);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status host_free(void* pointer) {
  pthread_mutex_lock(&lock);
  flush_device(-1); /* queued copies may still read or write it, as with cudaFreeHost */
  pthread_mutex_unlock(&lock);
  free(pointer);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status stream_create(torchplug_stream* stream, int32_t priority) {
  (void)priority;
  *stream = calloc(1, sizeof(**stream));
  if (*stream == NULL) return fail(TORCHPLUG_ERROR_OUT_OF_MEMORY, "stream_create: out of host memory");
  (*stream)->device = current;
  (*stream)->last = &(*stream)->first;
  pthread_mutex_lock(&lock);
  (*stream)->next = created_streams;
  created_streams = *stream;
  pthread_mutex_unlock(&lock);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status stream_destroy(torchplug_stream stream) {
  if (stream == NULL) return TORCHPLUG_SUCCESS;
  pthread_mutex_lock(&lock);
  flush(stream);
  for (torchplug_stream* link = &created_streams; *link != NULL; link = &(*link)->next) {
    if (*link == stream) {
      *link = stream->next;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  free(stream);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status stream_synchronize(torchplug_stream stream) {
  pthread_mutex_lock(&lock);
  flush(resolve(stream, current));
  pthread_mutex_unlock(&lock);
  return TORCHPLUG_SUCCESS;
}

/* A stream with queued copies reports NOT_READY once; they finish just after. */
static torchplug_status stream_query(torchplug_stream stream) {
  pthread_mutex_lock(&lock);
  const int busy = flush(resolve(stream, current));
  pthread_mutex_unlock(&lock);
  return busy ? TORCHPLUG_ERROR_NOT_READY : TORCHPLUG_SUCCESS;
}

static torchplug_status stream_wait_event(torchplug_stream stream, torchplug_event event) {
  (void)stream; /* the work before an event has run by the time it is recorded (event_record) */
  (void)event;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status event_create(torchplug_event* event, int32_t enable_timing) {
  *event = calloc(1, sizeof(**event));
  if (*event == NULL) return fail(TORCHPLUG_ERROR_OUT_OF_MEMORY, "event_create: out of host memory");
  (*event)->device = current;
  (*event)->timing = enable_timing;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status event_destroy(torchplug_event event) {
  free(event);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status event_record(torchplug_event event, torchplug_stream stream) {
  pthread_mutex_lock(&lock);
  flush(resolve(stream, event->device)); /* the stream's work up to the event runs now */
  pthread_mutex_unlock(&lock);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  event->milliseconds = now.tv_sec * 1e3 + now.tv_nsec / 1e6;
  event->recorded = 1;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status event_done(torchplug_event event) {
  (void)event;
  return TORCHPLUG_SUCCESS;
}

static torchplug_status event_elapsed_time(float* milliseconds, torchplug_event start, torchplug_event end) {
  if (!start->timing || !end->timing) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "elapsed_time: both events must be created with enable_timing=True");
  }
  if (!start->recorded || !end->recorded) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "elapsed_time: both events must be recorded first");
  }
  *milliseconds = (float)(end->milliseconds - start->milliseconds);
  return TORCHPLUG_SUCCESS;
}

static torchplug_status launch_host(int32_t device, torchplug_stream stream, torchplug_host_kernel kernel,
                                    void* arguments) {
  if (!valid_device(device)) return fail(TORCHPLUG_ERROR_INVALID_DEVICE, "invalid device ordinal %d", device);
  pthread_mutex_lock(&lock);
  flush(resolve(stream, device)); /* the kernel runs after the stream's queued work */
  for (block* b = blocks; b != NULL; b = b->next) {
    if (b->device == device) mprotect(b->data, b->mapped, PROT_READ | PROT_WRITE);
  }
  kernel(arguments);
  for (block* b = blocks; b != NULL; b = b->next) {
    if (b->device == device) mprotect(b->data, b->mapped, PROT_NONE);
  }
  pthread_mutex_unlock(&lock);
  return TORCHPLUG_SUCCESS;
}

static const torchplug_device_runtime table = {
    .abi_version = TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION,
    .struct_size = sizeof(torchplug_device_runtime),
    .name = "torchplug example device runtime 0.1",
    .last_error = last_error,
    .device_count = device_count,
    .set_device = set_device,
    .get_device = get_device,
    .get_device_properties = get_device_properties,
    .synchronize = synchronize,
    .malloc = device_malloc,
    .free = device_free,
    .memcpy = copy,
    .memcpy_async = copy_async,
    .memset = device_memset,
    .host_malloc = host_malloc,
    .host_free = host_free,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .stream_query = stream_query,
    .stream_wait_event = stream_wait_event,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_done,
    .event_synchronize = event_done,
    .event_elapsed_time = event_elapsed_time,
    .launch_host = launch_host,
};

const torchplug_device_runtime* torchplug_device_runtime_v1(void) { return &table; }
