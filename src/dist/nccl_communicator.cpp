#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace hytra::dist {

namespace {

void check(ncclResult_t r, const char* what) {
  HYTRA_CHECK(r == ncclSuccess, what, " failed: ", ncclGetErrorString(r));
}
void check(cudaError_t r, const char* what) { HYTRA_CHECK(r == cudaSuccess, what, " failed: ", cudaGetErrorString(r)); }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::BF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

void check_cuda(const Tensor& t, const char* what) {
  HYTRA_CHECK(t.device() == Device::CUDA, what, ": the NCCL backend takes CUDA tensors");
  HYTRA_CHECK(t.is_contiguous(), what, ": the tensor must be contiguous");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t c, cudaStream_t compute) : comm_(c), compute_(compute) {
    check(ncclCommUserRank(c, &rank_), "ncclCommUserRank");
    check(ncclCommCount(c, &size_), "ncclCommCount");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    events_.resize(size_t(kEvents));
    for (cudaEvent_t& e : events_)
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check(cudaMalloc(&token_, 4), "cudaMalloc");
  }
  ~NcclCommunicator() override {
    ncclCommDestroy(comm_);
    cudaFree(token_);
    cudaEventDestroy(queued_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::CUDA; }

  void all_reduce_sum(Tensor& t) override { wait(all_reduce_sum_async(t)); }
  void reduce_scatter_sum(Tensor& out, const Tensor& in) override { wait(reduce_scatter_sum_async(out, in)); }
  void all_gather(Tensor& out, const Tensor& in) override { wait(all_gather_async(out, in)); }

  Ticket all_reduce_sum_async(Tensor& t) override {
    check_cuda(t, "all_reduce_sum");
    return queue([&] {
      check(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_type(t.dtype()), ncclSum, comm_, stream_),
            "ncclAllReduce");
    });
  }
  Ticket reduce_scatter_sum_async(Tensor& out, const Tensor& in) override {
    check_cuda(out, "reduce_scatter_sum");
    check_cuda(in, "reduce_scatter_sum");
    HYTRA_CHECK(in.numel() == out.numel() * size_ && in.dtype() == out.dtype(), "reduce_scatter_sum: the input has ",
                in.numel(), " elements, expected ", size_, " x ", out.numel(), " of the output's dtype");
    return queue([&] {
      check(ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), nccl_type(in.dtype()), ncclSum, comm_, stream_),
            "ncclReduceScatter");
    });
  }
  Ticket all_gather_async(Tensor& out, const Tensor& in) override {
    check_cuda(out, "all_gather");
    check_cuda(in, "all_gather");
    HYTRA_CHECK(out.numel() == in.numel() * size_ && in.dtype() == out.dtype(), "all_gather: the output has ",
                out.numel(), " elements, expected ", size_, " x ", in.numel(), " of the input's dtype");
    return queue([&] {
      check(ncclAllGather(in.raw(), out.raw(), size_t(in.numel()), nccl_type(in.dtype()), comm_, stream_),
            "ncclAllGather");
    });
  }
  void broadcast(Tensor& t, int root) override {
    check_cuda(t, "broadcast");
    HYTRA_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside the group of ", size_);
    run([&] {
      check(ncclBroadcast(t.raw(), t.raw(), size_t(t.numel()), nccl_type(t.dtype()), root, comm_, stream_),
            "ncclBroadcast");
    });
  }
  void all_to_all_v(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                    const std::vector<int64_t>& recv_rows) override {
    wait(all_to_all_v_async(out, in, send_rows, recv_rows));
  }
  Ticket all_to_all_v_async(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                            const std::vector<int64_t>& recv_rows) override {
    check_cuda(out, "all_to_all_v");
    check_cuda(in, "all_to_all_v");
    HYTRA_CHECK(int(send_rows.size()) == size_ && int(recv_rows.size()) == size_ && in.dtype() == out.dtype(),
                "all_to_all_v: one row count a rank expected (", size_, ")");
    const int64_t rows_in = std::max<int64_t>(in.size(0), 1), rows_out = std::max<int64_t>(out.size(0), 1);
    const int64_t w = in.size(0) > 0 ? in.numel() / rows_in : out.numel() / rows_out;
    HYTRA_CHECK(in.size(0) == 0 || out.size(0) == 0 || w == out.numel() / rows_out, "all_to_all_v: row widths differ");
    int64_t total_s = 0, total_r = 0;
    for (int p = 0; p < size_; ++p) {
      total_s += send_rows[size_t(p)] * w;
      total_r += recv_rows[size_t(p)] * w;
    }
    HYTRA_CHECK(total_s == in.numel() && total_r == out.numel(), "all_to_all_v: the row counts sum to ",
                total_s / std::max<int64_t>(w, 1), " sent and ", total_r / std::max<int64_t>(w, 1),
                " received, the tensors have ", in.size(0), " and ", out.size(0), " rows");
    const size_t bytes = dtype_size(in.dtype());
    if (timing_ != nullptr)
      timing_->bytes += (total_s - send_rows[size_t(rank_)] * w) * int64_t(bytes);  // (what stays is no transfer)
    return queue([&] {  // the group is ended before any error is raised: an open group would swallow every later call
      check(ncclGroupStart(), "ncclGroupStart");
      ncclResult_t r = ncclSuccess;
      int64_t s = 0, rr = 0;
      for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
        const int64_t ns = send_rows[size_t(p)] * w, nr = recv_rows[size_t(p)] * w;
        if (ns > 0)
          r = ncclSend(static_cast<const char*>(in.raw()) + size_t(s) * bytes, size_t(ns), nccl_type(in.dtype()), p,
                       comm_, stream_);
        if (nr > 0 && r == ncclSuccess)
          r = ncclRecv(static_cast<char*>(out.raw()) + size_t(rr) * bytes, size_t(nr), nccl_type(in.dtype()), p,
                       comm_, stream_);
        s += ns;
        rr += nr;
      }
      end_group(r, "all_to_all_v: ncclSend/ncclRecv");
    });
  }
  void send(const Tensor& t, int peer) override {
    check_cuda(t, "send");
    run([&] { check(ncclSend(t.raw(), size_t(t.numel()), nccl_type(t.dtype()), peer, comm_, stream_), "ncclSend"); });
  }
  void recv(Tensor& t, int peer) override {
    check_cuda(t, "recv");
    run([&] { check(ncclRecv(t.raw(), size_t(t.numel()), nccl_type(t.dtype()), peer, comm_, stream_), "ncclRecv"); });
  }
  void send_recv(const Tensor& out, int to, Tensor& in, int from) override {
    check_cuda(out, "send_recv");
    check_cuda(in, "send_recv");
    run([&] {  // one group: the two transfers progress together
      check(ncclGroupStart(), "ncclGroupStart");
      ncclResult_t r = ncclSend(out.raw(), size_t(out.numel()), nccl_type(out.dtype()), to, comm_, stream_);
      if (r == ncclSuccess) r = ncclRecv(in.raw(), size_t(in.numel()), nccl_type(in.dtype()), from, comm_, stream_);
      end_group(r, "ncclSend/ncclRecv");
    });
  }
  void exchange(const std::vector<Send>& sends, const std::vector<Recv>& recvs) override {
    if (sends.empty() && recvs.empty()) return;
    for (const Send& s : sends) check_cuda(*s.t, "exchange");
    for (const Recv& r : recvs) check_cuda(*r.t, "exchange");
    run([&] {  // one group, in the listed order (the tags are MPI's)
      check(ncclGroupStart(), "ncclGroupStart");
      ncclResult_t e = ncclSuccess;
      for (const Send& s : sends)
        if (e == ncclSuccess)
          e = ncclSend(s.t->raw(), size_t(s.t->numel()), nccl_type(s.t->dtype()), s.peer, comm_, stream_);
      for (const Recv& r : recvs)
        if (e == ncclSuccess)
          e = ncclRecv(r.t->raw(), size_t(r.t->numel()), nccl_type(r.t->dtype()), r.peer, comm_, stream_);
      end_group(e, "ncclSend/ncclRecv");
    });
  }
  // An all-reduce of one element, waited for on the host.
  void barrier() override {
    run([&] { check(ncclAllReduce(token_, token_, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce"); });
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void wait(Ticket t) override {
    HYTRA_ASSERT(t >= 0 && t < next_, "NCCL: ticket ", t, " was not issued");
    // A ticket whose event the ring has reused: the oldest event still held comes after it on the stream.
    const Ticket held = std::max(t, next_ - kEvents);
    const int begin = timing_ != nullptr ? timing_->clock->mark(compute_) : 0;
    check(cudaStreamWaitEvent(compute_, events_[size_t(held % kEvents)], 0), "cudaStreamWaitEvent");
    if (timing_ != nullptr) timing_->waits.push_back({begin, timing_->clock->mark(compute_)});
  }
  void time_with(CommTiming* timing) override { timing_ = timing; }
  std::unique_ptr<Communicator> split(int color, int key) override {
    ncclComm_t c = nullptr;
    check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &c, nullptr), "ncclCommSplit");
    if (c == nullptr) return nullptr;
    return std::make_unique<NcclCommunicator>(c, compute_);
  }

 private:
  // The operation on this communicator's stream, ordered after the compute stream's queued work and before
  // its later work.
  template <class F>
  void run(F op) {
    wait(queue(op));
  }
  // The operation on this communicator's stream after the compute stream's queued work; its ticket names the
  // event recorded after it (a ring of kEvents; wait() on an older ticket waits for the oldest event held).
  // Ends the open group, then raises the group's first error (`r`) or the end's.
  void end_group(ncclResult_t r, const char* what) {
    const ncclResult_t e = ncclGroupEnd();
    check(r, what);
    check(e, "ncclGroupEnd");
  }
  template <class F>
  Ticket queue(F op) {
    check(cudaEventRecord(queued_, compute_), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream_, queued_, 0), "cudaStreamWaitEvent");
    const int begin = timing_ != nullptr ? timing_->clock->mark(stream_) : 0;
    op();
    if (timing_ != nullptr) timing_->runs.push_back({begin, timing_->clock->mark(stream_)});
    const Ticket t = next_++;
    check(cudaEventRecord(events_[size_t(t % kEvents)], stream_), "cudaEventRecord");
    return t;
  }

  static constexpr Ticket kEvents = 256;
  std::vector<cudaEvent_t> events_;
  Ticket next_ = 0;
  ncclComm_t comm_;
  cudaStream_t compute_, stream_ = nullptr;
  cudaEvent_t queued_ = nullptr;
  CommTiming* timing_ = nullptr;
  void* token_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> nccl_communicator(Communicator* bootstrap, int rank, int size, void* compute_stream) {
  setenv("NCCL_ALGO", "Ring", 0);  // fixed reduction order: reruns give the same bits
  setenv("NCCL_PROTO", "Simple", 0);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  HYTRA_CHECK(bootstrap != nullptr || size == 1 || std::getenv("NCCL_COMM_ID") != nullptr, "NCCL over ", size,
              " ranks without MPI needs NCCL_COMM_ID (a torchrun-style launch sets it from "
              "MASTER_ADDR and MASTER_PORT)");
  if (rank == 0 || bootstrap == nullptr) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (bootstrap != nullptr && size > 1) {
    static_assert(sizeof(ncclUniqueId) % 4 == 0);
    Tensor t = Tensor::empty({int64_t(sizeof id / 4)}, DType::I32);
    std::memcpy(t.raw(), &id, sizeof id);
    bootstrap->broadcast(t, 0);
    std::memcpy(&id, t.raw(), sizeof id);
  }
  ncclComm_t c = nullptr;
  check(ncclCommInitRank(&c, size, id, rank), "ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(c, static_cast<cudaStream_t>(compute_stream));
}

}  // namespace hytra::dist
