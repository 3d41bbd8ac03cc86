// The MPI communicator under mpirun (CTest runs it with 2 and 4 ranks): every collective against values each
// rank derives itself from a formula of every rank's input, the reductions summed in rank order (so their
// bits are fixed), the groups of a split, and point-to-point transfers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dist/world.h"
#include "nn/moe/expert_dispatch.h"

namespace hytra::dist {
namespace {

Communicator* g_comm = nullptr;

// Rank r's i-th input: magnitudes far apart, so a different summation order gives different bits.
float value(int r, int64_t i) {
  return (r % 2 == 0 ? 1.0e7f : 1.0f) * float(1 + r) + 0.1f * float(i % 7) * float(r + 1);
}

float rank_order_sum(int size, int64_t i) {
  float s = value(0, i);
  for (int r = 1; r < size; ++r) s += value(r, i);
  return s;
}

TEST(MpiCommunicator, WorldMatchesTheLauncher) {
  ASSERT_NE(g_comm, nullptr) << "run under mpirun with at least 2 ranks";
  EXPECT_GE(g_comm->size(), 2);
}

TEST(MpiCommunicator, AllReduceSumsInRankOrder) {
  for (int64_t n : {1, 5, 1000, 4099}) {  // sizes that do and do not split evenly over the ranks
    Tensor t = Tensor::empty({n}, DType::F32);
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value(g_comm->rank(), i);
    g_comm->all_reduce_sum(t);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(t.data<float>()[i], rank_order_sum(g_comm->size(), i)) << "n " << n;
  }
  Tensor k = Tensor::empty({3}, DType::I64);
  for (int64_t i = 0; i < 3; ++i) k.data<int64_t>()[i] = (int64_t(1) << 40) * (g_comm->rank() + 1) + i;
  g_comm->all_reduce_sum(k);
  const int64_t s = g_comm->size();
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(k.data<int64_t>()[i], (int64_t(1) << 40) * s * (s + 1) / 2 + s * i);
}

TEST(MpiCommunicator, ReduceScatterAndAllGather) {
  const int S = g_comm->size(), me = g_comm->rank();
  const int64_t n = 6;
  Tensor in = Tensor::empty({n * S}, DType::F64);
  for (int64_t i = 0; i < n * S; ++i) in.data<double>()[i] = double(value(me, i));
  Tensor part = Tensor::empty({n}, DType::F64);
  g_comm->reduce_scatter_sum(part, in);
  for (int64_t i = 0; i < n; ++i) {
    double want = double(value(0, me * n + i));
    for (int r = 1; r < S; ++r) want += double(value(r, me * n + i));
    EXPECT_EQ(part.data<double>()[i], want);
  }
  Tensor mine = Tensor::empty({2}, DType::I32), all = Tensor::empty({2 * S}, DType::I32);
  mine.data<int32_t>()[0] = 10 * me;
  mine.data<int32_t>()[1] = 10 * me + 1;
  g_comm->all_gather(all, mine);
  for (int r = 0; r < S; ++r) {
    EXPECT_EQ(all.data<int32_t>()[2 * r], 10 * r);
    EXPECT_EQ(all.data<int32_t>()[2 * r + 1], 10 * r + 1);
  }
}

// The forms the data-parallel overlap uses: asynchronous (MPI: complete on return) and in place, each rank's
// part inside the whole buffer.
TEST(MpiCommunicator, InPlaceAsyncReduceScatterAndAllGather) {
  const int S = g_comm->size(), me = g_comm->rank();
  const int64_t n = 5;
  Tensor buf = Tensor::empty({n * S}, DType::F32);
  for (int64_t i = 0; i < n * S; ++i) buf.data<float>()[i] = value(me, i);
  Tensor mine = buf.narrow(0, me * n, n);
  g_comm->wait(g_comm->reduce_scatter_sum_async(mine, buf));
  for (int64_t i = 0; i < n; ++i) {
    float want = value(0, me * n + i);
    for (int r = 1; r < S; ++r) want += value(r, me * n + i);
    ASSERT_EQ(buf.data<float>()[me * n + i], want);
  }
  for (int64_t i = 0; i < n; ++i) buf.data<float>()[me * n + i] = float(100 * me + i);
  g_comm->wait(g_comm->all_gather_async(buf, mine));
  for (int r = 0; r < S; ++r)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(buf.data<float>()[r * n + i], float(100 * r + i));
  Tensor t = Tensor::empty({3}, DType::F32);
  for (int64_t i = 0; i < 3; ++i) t.data<float>()[i] = value(me, i);
  g_comm->wait(g_comm->all_reduce_sum_async(t));
  for (int64_t i = 0; i < 3; ++i) ASSERT_EQ(t.data<float>()[i], rank_order_sum(S, i));
}

TEST(MpiCommunicator, BroadcastFromTheLastRank) {
  Tensor t = Tensor::empty({4}, DType::BF16);
  for (int i = 0; i < 4; ++i) t.data<uint16_t>()[i] = uint16_t(g_comm->rank() * 100 + i);
  g_comm->broadcast(t, g_comm->size() - 1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data<uint16_t>()[i], uint16_t((g_comm->size() - 1) * 100 + i));
}

// Rank s sends (s + d) % S + 1 rows of width 3 to rank d, row j holding (s, d, j).
TEST(MpiCommunicator, AllToAllVMovesRowsInRankOrder) {
  const int S = g_comm->size(), me = g_comm->rank();
  auto rows = [&](int s, int d) { return int64_t((s + d) % S + 1); };
  std::vector<int64_t> send(static_cast<size_t>(S)), recv(static_cast<size_t>(S));
  int64_t ns = 0, nr = 0;
  for (int r = 0; r < S; ++r) {
    send[size_t(r)] = rows(me, r);
    recv[size_t(r)] = rows(r, me);
    ns += send[size_t(r)];
    nr += recv[size_t(r)];
  }
  Tensor in = Tensor::empty({ns, 3}, DType::I32), out = Tensor::empty({nr, 3}, DType::I32);
  int32_t* p = in.data<int32_t>();
  for (int d = 0; d < S; ++d)
    for (int64_t j = 0; j < rows(me, d); ++j, p += 3) {
      p[0] = me;
      p[1] = d;
      p[2] = int32_t(j);
    }
  g_comm->all_to_all_v(out, in, send, recv);
  const int32_t* q = out.data<int32_t>();
  for (int s = 0; s < S; ++s)
    for (int64_t j = 0; j < rows(s, me); ++j, q += 3) {
      EXPECT_EQ(q[0], s);
      EXPECT_EQ(q[1], me);
      EXPECT_EQ(q[2], j);
    }
}

TEST(MpiCommunicator, SplitGroupsAndSendRecvAroundARing) {
  const int me = g_comm->rank();
  std::unique_ptr<Communicator> half = g_comm->split(me % 2, me);  // even and odd ranks
  EXPECT_EQ(half->size(), (g_comm->size() + 1 - me % 2) / 2);
  EXPECT_EQ(half->rank(), me / 2);
  Tensor t = Tensor::empty({1}, DType::I64);
  t.data<int64_t>()[0] = me;
  half->all_reduce_sum(t);
  int64_t want = 0;
  for (int r = me % 2; r < g_comm->size(); r += 2) want += r;
  EXPECT_EQ(t.data<int64_t>()[0], want);
  // A negative color: those ranks join no group (every rank still calls split).
  std::unique_ptr<Communicator> evens = g_comm->split(me % 2 == 0 ? 0 : -1, me);
  EXPECT_EQ(evens != nullptr, me % 2 == 0);
  if (evens) {
    EXPECT_EQ(evens->size(), (g_comm->size() + 1) / 2);
  }
  // A ring: even ranks send first, odd ranks receive first (no deadlock for any size).
  const int S = g_comm->size(), next = (me + 1) % S, prev = (me + S - 1) % S;
  Tensor out = Tensor::empty({2}, DType::F32), in = Tensor::empty({2}, DType::F32);
  out.data<float>()[0] = float(me);
  out.data<float>()[1] = 0.5f;
  if (me % 2 == 0) {
    g_comm->send(out, next);
    g_comm->recv(in, prev);
  } else {
    g_comm->recv(in, prev);
    g_comm->send(out, next);
  }
  EXPECT_EQ(in.data<float>()[0], float(prev));
  EXPECT_EQ(in.data<float>()[1], 0.5f);
  // The same ring as one exchange a rank, every rank at once (as two blocking calls it could deadlock), with a
  // message large enough that MPI does not buffer it.
  const int64_t n = 1 << 20;
  Tensor big_out = Tensor::empty({n}, DType::F32), big_in = Tensor::zeros({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) big_out.data<float>()[i] = float(me);
  g_comm->send_recv(big_out, next, big_in, prev);
  EXPECT_EQ(big_in.data<float>()[0], float(prev));
  EXPECT_EQ(big_in.data<float>()[n - 1], float(prev));
  g_comm->barrier();
}

// One batched exchange a rank (the interleaved pipeline's step): a large message to the next rank and a small one to
// the previous, received from the previous and the next, every rank at once. With two ranks next and previous are
// one rank: the tags keep the two streams apart.
TEST(Dist, ExchangeSendsBothWaysAtOnce) {
  const int me = g_comm->rank(), n_ranks = g_comm->size();
  const int next = (me + 1) % n_ranks, prev = (me + n_ranks - 1) % n_ranks;
  const int64_t n = 1 << 20;
  Tensor fwd_out = Tensor::empty({n}, DType::F32), fwd_in = Tensor::zeros({n}, DType::F32);
  Tensor bwd_out = Tensor::empty({3}, DType::F32), bwd_in = Tensor::zeros({3}, DType::F32);
  for (int64_t i = 0; i < n; ++i) fwd_out.data<float>()[i] = float(me) + float(i % 7);
  for (int64_t i = 0; i < 3; ++i) bwd_out.data<float>()[i] = -1.0f - float(me);
  g_comm->exchange({{&fwd_out, next, 1}, {&bwd_out, prev, 2}}, {{&fwd_in, prev, 1}, {&bwd_in, next, 2}});
  EXPECT_EQ(fwd_in.data<float>()[0], float(prev));
  EXPECT_EQ(fwd_in.data<float>()[n - 1], float(prev) + float((n - 1) % 7));
  EXPECT_EQ(bwd_in.data<float>()[2], -1.0f - float(next));
  g_comm->exchange({}, {});  // nothing to move: returns
  g_comm->barrier();
}

// Expert parallelism's exchange (nn/moe/expert_dispatch.h): each rank's rows, grouped by global expert (2 experts a
// rank), reach the experts' ranks in (local expert, source rank) order and come back unchanged, the plan's unused
// tail zero. Rank 1's experts get no rows at all (an expert-parallel rank with nothing to compute).
TEST(Dist, ExpertExchangeReachesTheExpertsAndComesBack) {
  const int me = g_comm->rank(), P = g_comm->size();
  const int64_t El = 2, E = El * P, C = 3;
  auto count = [&](int src, int64_t e) -> int64_t { return e / El == 1 ? 0 : (src + e) % 3 + 1; };
  std::vector<int32_t> offsets(size_t(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) offsets[size_t(e + 1)] = offsets[size_t(e)] + int32_t(count(me, e));
  const int64_t used = offsets[size_t(E)], R = used + 2;
  Tensor rows = Tensor::zeros({R, C}, DType::F32);  // row i of expert e: (source, e, i)
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < count(me, e); ++i) {
      float* r = rows.data<float>() + (offsets[size_t(e)] + i) * C;
      r[0] = float(me), r[1] = float(e), r[2] = float(i);
    }
  for (int64_t i = used; i < R; ++i) rows.data<float>()[i * C] = 99.0f;  // the unused tail
  Tensor off = Tensor::empty({E + 1}, DType::I32);
  std::copy(offsets.begin(), offsets.end(), off.data<int32_t>());
  const ExpertParallel ep{g_comm, P, me};
  const ExpertExchange xc = plan_exchange(Exec::cpu(), ep, off);
  Exec& ex = Exec::cpu();
  const Tensor local = to_experts(ex, ep, xc, rows);
  int64_t at = 0;
  for (int64_t f = 0; f < El; ++f) {
    const int64_t e = me * El + f;
    EXPECT_EQ(xc.local_offsets.data<int32_t>()[f], at);
    for (int src = 0; src < P; ++src)
      for (int64_t i = 0; i < count(src, e); ++i, ++at) {
        const float* r = local.data<float>() + at * C;
        EXPECT_EQ(r[0], float(src));
        EXPECT_EQ(r[1], float(e));
        EXPECT_EQ(r[2], float(i));
      }
  }
  EXPECT_EQ(xc.rows, at);
  if (me == 1) {
    EXPECT_EQ(xc.rows, 0);
  }
  const Tensor back = from_experts(ex, ep, xc, local, R);
  for (int64_t i = 0; i < R * C; ++i)
    EXPECT_EQ(back.data<float>()[i], i < used * C ? rows.data<float>()[i] : 0.0f) << "element " << i;
}

// Padded to capacity, every rank sends each expert the same rows: the exchange built from the sizes alone
// (uniform_exchange, no collective) is the one the gathered counts give.
TEST(Dist, UniformExpertExchangeIsTheCountedOne) {
  const int me = g_comm->rank(), P = g_comm->size();
  const int64_t El = 3, E = El * P, per_expert = 5;
  Tensor off = Tensor::empty({E + 1}, DType::I32);
  for (int64_t e = 0; e <= E; ++e) off.data<int32_t>()[e] = int32_t(e * per_expert);
  const ExpertParallel ep{g_comm, P, me};
  const ExpertExchange counted = plan_exchange(Exec::cpu(), ep, off);
  const ExpertExchange uniform = uniform_exchange(Exec::cpu(), ep, E, per_expert);
  EXPECT_EQ(uniform.send_rows, counted.send_rows);
  EXPECT_EQ(uniform.recv_rows, counted.recv_rows);
  EXPECT_EQ(uniform.used, E * per_expert);
  EXPECT_EQ(uniform.used, counted.used);
  EXPECT_EQ(uniform.rows, P * El * per_expert);
  EXPECT_EQ(uniform.rows, counted.rows);
  auto values = [](const Tensor& t) { return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel()); };
  EXPECT_EQ(values(uniform.to_local), values(counted.to_local));
  EXPECT_EQ(values(uniform.to_received), values(counted.to_received));
  EXPECT_EQ(values(uniform.local_offsets), values(counted.local_offsets));
}

}  // namespace
}  // namespace hytra::dist

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  hytra::dist::World world;
  hytra::dist::g_comm = world.comm();
  // Only rank 0 prints the report; every rank's failures still set its exit code.
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
