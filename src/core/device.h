// Where a tensor's storage lives.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hytra {

enum class Device : uint8_t { CPU, CUDA };

inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// True when this build has the CUDA backend and a GPU is visible (defined in core; the CUDA
// part lives in cuda_runtime_cuda.cu, a stub answers false in CPU-only builds).
bool cuda_available();

// Waits for all work queued on a CUDA stream (null = the legacy default stream); no-op without CUDA.
void cuda_stream_synchronize(void* stream);
// Makes GPU `local_rank` this process's device (before any other CUDA work: a multi-process run puts one
// rank on each GPU); `local_ranks` (the ranks on this node) must not exceed the visible GPUs. Fails clearly
// without CUDA.
void cuda_select_device(int local_rank, int local_ranks);
// A new CUDA stream, ordered with the legacy default stream (so cudaMemcpy/cudaMemset stay ordered
// with the work queued on it). Fails clearly without CUDA.
void* cuda_stream_create();
// CUDA events for timing (core/stream_clock.h). Fail clearly without CUDA.
void* cuda_event_create();
void cuda_event_destroy(void* event);
void cuda_event_record(void* event, void* stream);
// Milliseconds from `from` to `to`, after waiting for `to` to complete.
double cuda_event_elapsed_ms(void* from, void* to);
// Waits on the host until the work before the event's record has run.
void cuda_event_synchronize(void* event);
// Page-locked host memory (asynchronous copies from the device land in it without the host waiting).
void* cuda_host_alloc(size_t nbytes);
void cuda_host_free(void* p);

}  // namespace hytra
