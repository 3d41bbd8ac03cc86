#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstring>

#include "core/error.h"

namespace hytra::dist {

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  HYTRA_CHECK(false, what, " failed: ", std::string(msg, size_t(len)));
}

void check_cpu(const Tensor& t, const char* what) {
  HYTRA_CHECK(t.device() == Device::CPU, what, ": the MPI backend takes CPU tensors");
  HYTRA_CHECK(t.is_contiguous(), what, ": the tensor must be contiguous");
}

int count_of(int64_t n, const char* what) {
  HYTRA_CHECK(n <= INT_MAX, what, ": ", n, " elements exceed MPI's count limit (", INT_MAX, ")");
  return int(n);
}

// dst += src element-wise.
template <class T>
void add_into(void* dst, const void* src, int64_t n) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}

void add_into(DType t, void* dst, const void* src, int64_t n) {
  switch (t) {
    case DType::F32: add_into<float>(dst, src, n); return;
    case DType::F64: add_into<double>(dst, src, n); return;
    case DType::I32: add_into<int32_t>(dst, src, n); return;
    case DType::I64: add_into<int64_t>(dst, src, n); return;
    case DType::BF16: break;
  }
  HYTRA_CHECK(false, "MPI sum: ", dtype_name(t), " tensors are not summed (fp32, fp64, int32 or int64)");
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm c) : comm_(c) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::CPU; }

  void all_reduce_sum(Tensor& t) override {
    check_cpu(t, "all_reduce_sum");
    if (size_ == 1) return;
    const int64_t n = t.numel(), part = (n + size_ - 1) / size_;
    Tensor padded = Tensor::zeros({part * size_}, t.dtype());
    std::memcpy(padded.raw(), t.raw(), t.nbytes());
    Tensor mine = Tensor::empty({part}, t.dtype());
    reduce_scatter_sum(mine, padded);
    all_gather(padded, mine);
    std::memcpy(t.raw(), padded.raw(), t.nbytes());
  }

  // Each rank receives every rank's copy of its part (one all-to-all) and adds them in rank order.
  void reduce_scatter_sum(Tensor& out, const Tensor& in) override {
    check_cpu(out, "reduce_scatter_sum");
    check_cpu(in, "reduce_scatter_sum");
    const int64_t n = out.numel();
    HYTRA_CHECK(in.numel() == n * size_ && in.dtype() == out.dtype(), "reduce_scatter_sum: the input has ", in.numel(),
                " elements, expected ", size_, " x ", n, " of the output's dtype");
    if (size_ == 1) {
      if (out.raw() != in.raw()) std::memcpy(out.raw(), in.raw(), out.nbytes());
      return;
    }
    Tensor parts = Tensor::empty({n * size_}, in.dtype());
    const int c = count_of(n, "reduce_scatter_sum");
    check(MPI_Alltoall(in.raw(), c, mpi_type(in.dtype()), parts.raw(), c, mpi_type(in.dtype()), comm_), "MPI_Alltoall");
    const size_t bytes = out.nbytes();
    std::memcpy(out.raw(), parts.raw(), bytes);
    for (int r = 1; r < size_; ++r)
      add_into(out.dtype(), out.raw(), static_cast<const char*>(parts.raw()) + size_t(r) * bytes, n);
  }

  void all_gather(Tensor& out, const Tensor& in) override {
    check_cpu(out, "all_gather");
    check_cpu(in, "all_gather");
    HYTRA_CHECK(out.numel() == in.numel() * size_ && in.dtype() == out.dtype(), "all_gather: the output has ",
                out.numel(), " elements, expected ", size_, " x ", in.numel(), " of the input's dtype");
    const int c = count_of(in.numel(), "all_gather");
    // In place (in is this rank's part of out): MPI names that MPI_IN_PLACE (aliased buffers are erroneous).
    const bool in_place = in.raw() == static_cast<char*>(out.raw()) + size_t(rank_) * in.nbytes();
    timed([&] {
      check(MPI_Allgather(in_place ? MPI_IN_PLACE : in.raw(), c, mpi_type(in.dtype()), out.raw(), c,
                          mpi_type(in.dtype()), comm_),
            "MPI_Allgather");
    });
  }

  void broadcast(Tensor& t, int root) override {
    check_cpu(t, "broadcast");
    HYTRA_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside the group of ", size_);
    check(MPI_Bcast(t.raw(), count_of(t.numel(), "broadcast"), mpi_type(t.dtype()), root, comm_), "MPI_Bcast");
  }

  void all_to_all_v(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                    const std::vector<int64_t>& recv_rows) override {
    check_cpu(out, "all_to_all_v");
    check_cpu(in, "all_to_all_v");
    HYTRA_CHECK(int(send_rows.size()) == size_ && int(recv_rows.size()) == size_,
                "all_to_all_v: one row count a rank expected (", size_, ")");
    HYTRA_CHECK(in.dtype() == out.dtype() && in.dim() >= 1 && out.dim() >= 1, "all_to_all_v: tensors mismatch");
    const int64_t width = in.size(0) > 0 ? in.numel() / in.size(0) : 0;
    const int64_t out_width = out.size(0) > 0 ? out.numel() / out.size(0) : width;
    HYTRA_CHECK(in.size(0) == 0 || out.size(0) == 0 || width == out_width, "all_to_all_v: row widths differ (", width,
                " vs ", out_width, ")");
    const int64_t w = in.size(0) > 0 ? width : out_width;
    std::vector<int> sc(size_t(size_), 0), sd(size_t(size_), 0), rc(size_t(size_), 0), rd(size_t(size_), 0);
    int64_t s_off = 0, r_off = 0;
    for (int r = 0; r < size_; ++r) {
      sc[size_t(r)] = count_of(send_rows[size_t(r)] * w, "all_to_all_v");
      rc[size_t(r)] = count_of(recv_rows[size_t(r)] * w, "all_to_all_v");
      sd[size_t(r)] = count_of(s_off, "all_to_all_v");
      rd[size_t(r)] = count_of(r_off, "all_to_all_v");
      s_off += send_rows[size_t(r)] * w;
      r_off += recv_rows[size_t(r)] * w;
    }
    HYTRA_CHECK(s_off == in.numel() && r_off == out.numel(), "all_to_all_v: the row counts sum to ", s_off / w,
                " sent and ", r_off / w, " received, the tensors have ", in.size(0), " and ", out.size(0), " rows");
    const MPI_Datatype t = mpi_type(in.dtype());
    if (timing_ != nullptr)  // (what stays on this rank is no transfer)
      timing_->bytes += (s_off - send_rows[size_t(rank_)] * w) * int64_t(dtype_size(in.dtype()));
    timed([&] {
      check(MPI_Alltoallv(in.raw(), sc.data(), sd.data(), t, out.raw(), rc.data(), rd.data(), t, comm_),
            "MPI_Alltoallv");
    });
  }

  void send(const Tensor& t, int peer) override {
    check_cpu(t, "send");
    check(MPI_Send(t.raw(), count_of(t.numel(), "send"), mpi_type(t.dtype()), peer, 0, comm_), "MPI_Send");
  }
  void recv(Tensor& t, int peer) override {
    check_cpu(t, "recv");
    check(MPI_Recv(t.raw(), count_of(t.numel(), "recv"), mpi_type(t.dtype()), peer, 0, comm_, MPI_STATUS_IGNORE),
          "MPI_Recv");
  }
  void send_recv(const Tensor& out, int to, Tensor& in, int from) override {
    check_cpu(out, "send_recv");
    check_cpu(in, "send_recv");
    check(MPI_Sendrecv(out.raw(), count_of(out.numel(), "send_recv"), mpi_type(out.dtype()), to, 0, in.raw(),
                       count_of(in.numel(), "send_recv"), mpi_type(in.dtype()), from, 0, comm_, MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
  }
  void exchange(const std::vector<Send>& sends, const std::vector<Recv>& recvs) override {
    std::vector<MPI_Request> req;
    for (const Recv& r : recvs) {
      check_cpu(*r.t, "exchange");
      req.emplace_back();
      check(MPI_Irecv(r.t->raw(), count_of(r.t->numel(), "exchange"), mpi_type(r.t->dtype()), r.peer, r.tag, comm_,
                      &req.back()),
            "MPI_Irecv");
    }
    for (const Send& s : sends) {
      check_cpu(*s.t, "exchange");
      req.emplace_back();
      check(MPI_Isend(s.t->raw(), count_of(s.t->numel(), "exchange"), mpi_type(s.t->dtype()), s.peer, s.tag, comm_,
                      &req.back()),
            "MPI_Isend");
    }
    if (!req.empty()) check(MPI_Waitall(int(req.size()), req.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }
  // Blocking calls: each has completed when it returns.
  Ticket all_reduce_sum_async(Tensor& t) override {
    all_reduce_sum(t);
    return 0;
  }
  Ticket reduce_scatter_sum_async(Tensor& out, const Tensor& in) override {
    reduce_scatter_sum(out, in);
    return 0;
  }
  Ticket all_gather_async(Tensor& out, const Tensor& in) override {
    all_gather(out, in);
    return 0;
  }
  Ticket all_to_all_v_async(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                            const std::vector<int64_t>& recv_rows) override {
    all_to_all_v(out, in, send_rows, recv_rows);
    return 0;
  }
  void wait(Ticket) override {}
  void time_with(CommTiming* timing) override { timing_ = timing; }

  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm c;
    check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &c), "MPI_Comm_split");
    if (c == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(c);
  }

 private:
  // A blocking call, recorded (when timed) as running and as waited for at once.
  template <class F>
  void timed(F call) {
    const int begin = timing_ != nullptr ? timing_->clock->mark(nullptr) : 0;
    call();
    if (timing_ == nullptr) return;
    const std::pair<int, int> span{begin, timing_->clock->mark(nullptr)};
    timing_->runs.push_back(span);
    timing_->waits.push_back(span);
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  CommTiming* timing_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> mpi_world_communicator() {
  MPI_Comm c;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
  // Errors come back to check(), which names the call (they would otherwise abort inside MPI); the
  // communicators split from it inherit this.
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return std::make_unique<MpiCommunicator>(c);
}

}  // namespace hytra::dist
