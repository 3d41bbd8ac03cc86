// The communicator interface: collectives and point-to-point transfers among the ranks of one group
// (docs/parallelism.md). Tensors are contiguous and on the backend's device (MPI: CPU; NCCL: CUDA). The
// reductions are deterministic, so a rerun of the same layout gives the same bits: MPI sums every element
// over the ranks in rank order itself; NCCL runs with one fixed algorithm and protocol (ring, simple).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/stream_clock.h"
#include "core/tensor.h"

namespace hytra::dist {

// Where a communicator's operations ran (the EP-overlap timeline, train/overlap_timeline.h), as marks of a clock:
// each operation's start and end on the communicator's stream, and each time the caller's stream waited for one.
// MPI's blocking calls are both: the caller waits while they run.
struct CommTiming {
  StreamClock* clock = nullptr;
  std::vector<std::pair<int, int>> runs, waits;
  int64_t bytes = 0;  // what this rank's all-to-alls sent to other ranks
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;  // where the tensors live

  // t = sum over the ranks of t (in place; fp32, fp64, int32, int64; NCCL also bf16: the tensor-parallel
  // activations of bf16 runs).
  virtual void all_reduce_sum(Tensor& t) = 0;
  // out = this rank's part of the sum over the ranks of `in`: in has size() x out.numel() elements, part r
  // being elements [r n, (r + 1) n).
  virtual void reduce_scatter_sum(Tensor& out, const Tensor& in) = 0;
  // out = the ranks' `in` one after the other (out has size() x in.numel() elements).
  virtual void all_gather(Tensor& out, const Tensor& in) = 0;
  // t = root's t on every rank.
  virtual void broadcast(Tensor& t, int root) = 0;
  // Rows of `in` (its first dim) go to the ranks in order: send_rows[r] rows to rank r; `out` receives
  // recv_rows[r] rows from rank r, in rank order. Both tensors have the same row width and dtype.
  virtual void all_to_all_v(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                            const std::vector<int64_t>& recv_rows) = 0;
  // Blocking point-to-point transfers (NCCL: in stream order). A pair must not depend on a send whose receive
  // the peer issues only after its own send (NCCL gives no eager buffer): order them, e.g. even ranks first.
  virtual void send(const Tensor& t, int peer) = 0;
  virtual void recv(Tensor& t, int peer) = 0;
  // Sends `out` to `to` and receives `in` from `from` as one exchange (the pipeline's send-forward /
  // receive-backward pairs, which would deadlock as two blocking calls).
  virtual void send_recv(const Tensor& out, int to, Tensor& in, int from) = 0;
  // One batch of transfers that progress together and have all completed on return (the interleaved pipeline's
  // step, as Megatron's batched isend/irecv): each send to its peer, each receive from its peer. A stream of
  // messages is told apart from another between the same two ranks by `tag` (MPI); NCCL matches the transfers of
  // two ranks in the order they are listed, so both list a pair's streams in the same order.
  struct Send {
    const Tensor* t;
    int peer, tag;
  };
  struct Recv {
    Tensor* t;
    int peer, tag;
  };
  virtual void exchange(const std::vector<Send>& sends, const std::vector<Recv>& recvs) = 0;
  virtual void barrier() = 0;

  // Asynchronous forms (the data-parallel overlap, docs/parallelism.md): the operation is ordered after the work
  // already queued on the caller's stream, but later work does not wait for it until wait(ticket) (which also
  // covers every asynchronous operation issued before that one). NCCL runs it on its own stream; MPI completes it
  // before returning. In place is allowed: reduce-scatter's out may be this rank's part of in, all-gather's in
  // this rank's part of out.
  using Ticket = int64_t;
  virtual Ticket all_reduce_sum_async(Tensor& t) = 0;
  virtual Ticket reduce_scatter_sum_async(Tensor& out, const Tensor& in) = 0;
  virtual Ticket all_gather_async(Tensor& out, const Tensor& in) = 0;
  virtual Ticket all_to_all_v_async(Tensor& out, const Tensor& in, const std::vector<int64_t>& send_rows,
                                    const std::vector<int64_t>& recv_rows) = 0;
  virtual void wait(Ticket t) = 0;
  // Records this communicator's all-to-alls, all-gathers and waits in `timing` until called with null.
  virtual void time_with(CommTiming* timing) = 0;
  // The communicator of the ranks that pass the same `color`, ordered by `key` (every rank of this
  // communicator calls it). A negative color joins no group: nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

}  // namespace hytra::dist
