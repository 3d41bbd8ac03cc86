// Causal GQA flash attention through cuDNN's fused SDPA engines, built with the C backend API
// (cudnn_graph.h). The only file that includes cuDNN (docs/ARCHITECTURE.md).
//
// cuDNN's logical layout is (b, h, s, d); hytra's (B,T,H,D) tensors are expressed through strides:
//   Q, O, dO, dQ: dims (B,H,T,D) strides (T*H*D, D, H*D, 1);  K, V, dK, dV: (B,Hkv,T,D), (T*Hkv*D, D, Hkv*D, 1)
//   K^T (and V^T in the backward): dims (B,Hkv,D,T) strides (T*Hkv*D, D, 1, Hkv*D)
//   where V, O, dO and dV have the value head dim Dv in place of D (multi-latent attention: D 192, Dv 128).
//   stats = lse: (B,H,T,1) strides (H*T, T, 1, 1), fp32.
// GQA needs nothing more: the matmuls broadcast K/V's Hkv heads over Q's H heads (h -> h / (H/Hkv)),
// and in the backward a reduction over each group sums the per-query-head dK/dV.
//
// Forward graph (the pattern the fused flash engine recognises; virtual tensors are fp32 unless said):
//   S = Q @ K^T;  S *= scale;  S = select(row >= col ? S : -inf)   (GEN_INDEX axis 2/3, CMP_GE, BINARY_SELECT)
//   m = max_j S;  E = exp(S - m);  z = sum_j E;  stats = m + log z;  P = E / z (bf16);  O = P @ V
// stats is max + log(sum) of the scaled, masked scores: the natural-log log-sum-exp hytra calls lse.
// Backward graph (FlashAttention-2 maths, P rebuilt from stats):
//   softmax_sum = rowsum(dO * O) (fp32 (B,H,T,1), in our workspace);  E = exp(mask(S*scale - stats))
//   dV = E^T @ dO;  dP = dO @ V^T;  dS = (dP - softmax_sum) * E * scale;  dK = dS^T @ Q;  dQ = dS @ K
// with dK, dV summed over each GQA group by a reduction. dQ is written by its matmul directly: this
// is the graph that cudnn-frontend builds for set_deterministic_algorithm(true) on Hopper (cuDNN
// < 9.25; there is no backend attribute for it), which selects the engine variant that keeps dP in
// a workspace of B*H*T*T bf16 and reduces dQ in a fixed order. The default graph instead routes dQ
// through an fp32 accumulator that the engine updates with atomics (not reproducible). Engines that
// still carry CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC are skipped for the backward.
//
// Plans are built once per (direction, B, T, H, Hkv, D, Dv, device) and host thread: heuristics mode A
// then FALLBACK, first config that finalises. The softmax scale and the -inf / 1.0 constants are
// by-value scalars, so one plan serves every scale. Workspace comes from hytra's caching allocator
// for the duration of the call (steady state: no cudaMalloc). HYTRA_CUDNN_LOG=1 logs each plan.
#include <cudnn.h>

#include <array>
#include <cstdlib>
#include <cuda_runtime.h>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_check_cuda.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/cuda/attention_cudnn.h"

namespace hytra::cuda {
namespace {

void cudnn_check(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char detail[1024] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  fail(str("cuDNN error in ", what, ": ", cudnnGetErrorString(status), detail[0] ? ": " : "", detail));
}
#define HYTRA_CUDNN_CHECK(call) cudnn_check((call), #call)

// cudnnBackendSetAttribute, the error naming the attribute.
#define HYTRA_CUDNN_SET(desc, attr, type, count, ptr) \
  cudnn_check(cudnnBackendSetAttribute((desc), (attr), (type), (count), (ptr)), "cudnnBackendSetAttribute(" #attr ")")

// Owner of one backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    HYTRA_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~Desc() {
    if (d_) (void)cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// Unique ids of the tensors the caller binds at execution (virtual tensors number from kFirstVirtual).
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kDO, kDQ, kDK, kDV, kOne, kSoftmaxSum,
  kFirstVirtual = 100,
};

// A built execution plan and every descriptor it was made from (kept alive with it).
struct Plan {
  std::vector<std::unique_ptr<Desc>> owned;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;  // bytes the engine needs
};

// Builds one operation graph from backend descriptors.
class GraphBuilder {
 public:
  cudnnBackendDescriptor_t tensor(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type, bool is_virtual = false,
                                  bool by_value = false) {
    cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    HYTRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    HYTRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    HYTRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    HYTRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    HYTRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    HYTRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) HYTRA_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    HYTRA_CUDNN_CHECK(cudnnBackendFinalize(t));
    return t;
  }
  // fp32 scalar passed by value (a host pointer in the variant pack).
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true);
  }
  cudnnBackendDescriptor_t virt(Dims dims, Dims strides, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor(next_uid_++, dims, strides, type, true);
  }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    HYTRA_CUDNN_SET(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    HYTRA_CUDNN_CHECK(cudnnBackendFinalize(m));
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m);
    add_op(op);
  }

  // y = mode(x[, b[, t]]); axis >= 0 for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, cudnnDataType_t prec = CUDNN_DATA_FLOAT,
                 int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    HYTRA_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    HYTRA_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) HYTRA_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    HYTRA_CUDNN_CHECK(cudnnBackendFinalize(pw));
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(op);
  }
  cudnnBackendDescriptor_t unary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, Dims dims, Dims strides,
                                 cudnnDataType_t out_type = CUDNN_DATA_FLOAT) {
    cudnnBackendDescriptor_t y = virt(dims, strides, out_type);
    pointwise(mode, x, nullptr, nullptr, y);
    return y;
  }
  cudnnBackendDescriptor_t binary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                  Dims dims, Dims strides, cudnnDataType_t out_type = CUDNN_DATA_FLOAT) {
    cudnnBackendDescriptor_t y = virt(dims, strides, out_type);
    pointwise(mode, x, b, nullptr, y);
    return y;
  }

  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    HYTRA_CUDNN_SET(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    HYTRA_CUDNN_SET(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    HYTRA_CUDNN_CHECK(cudnnBackendFinalize(r));
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
    add_op(op);
  }

  // A new view of x's data (here: a transpose, expressed by y's dims and strides).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    HYTRA_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(op);
  }

  // The causal mask on scores x (B,H,Tq,Tk): keeps x where row >= col, else the -inf scalar.
  cudnnBackendDescriptor_t causal_mask(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t neg_inf, Dims dims,
                                       Dims strides) {
    cudnnBackendDescriptor_t row = virt(dims, strides, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
    cudnnBackendDescriptor_t col = virt(dims, strides, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
    cudnnBackendDescriptor_t keep = virt(dims, strides, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
    cudnnBackendDescriptor_t y = virt(dims, strides);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, neg_inf, keep, y);
    return y;
  }

  // Finalises the operation graph and returns the first heuristic config (mode A, then FALLBACK)
  // whose execution plan finalises; with `deterministic`, engines noted non-deterministic are skipped.
  std::unique_ptr<Plan> build(cudnnHandle_t handle, bool deterministic, const std::string& what) {
    auto plan = std::make_unique<Plan>();
    cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    HYTRA_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()),
                    ops_.data());
    HYTRA_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    cudnn_check(cudnnBackendFinalize(graph), ("cudnnBackendFinalize(operation graph) for " + what).c_str());

    std::string tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      HYTRA_CUDNN_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
      HYTRA_CUDNN_SET(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) {
        tried += str(" [heuristics mode ", int(mode), ": finalize failed]");
        continue;
      }
      int64_t count = 0;
      HYTRA_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
      std::vector<std::unique_ptr<Desc>> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw.push_back(cfgs.back()->get());
      }
      int64_t got = 0;
      if (count > 0)
        HYTRA_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
      tried += str(" [heuristics mode ", int(mode), ": ", got, " configs");
      for (int64_t i = 0; i < got; ++i) {
        const int64_t engine = engine_index(raw[size_t(i)]);
        if (deterministic && nondeterministic(raw[size_t(i)])) {
          tried += str("; engine ", engine, " skipped (non-deterministic)");
          continue;
        }
        auto exec = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        HYTRA_CUDNN_SET(exec->get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        HYTRA_CUDNN_SET(exec->get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                        &raw[size_t(i)]);
        const cudnnStatus_t st = cudnnBackendFinalize(exec->get());
        if (st != CUDNN_STATUS_SUCCESS) {
          tried += str("; engine ", engine, ": ", cudnnGetErrorString(st));
          continue;
        }
        int64_t ws = 0, n = 0;
        HYTRA_CUDNN_CHECK(cudnnBackendGetAttribute(exec->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                   CUDNN_TYPE_INT64, 1, &n, &ws));
        plan->plan = exec->get();
        plan->workspace = ws;
        plan->owned = std::move(owned_);
        plan->owned.push_back(std::move(cfgs[size_t(i)]));
        plan->owned.push_back(std::move(exec));
        if (const char* env = std::getenv("HYTRA_CUDNN_LOG"); log_shows(10) || (log_enabled && env && env[0] == '1'))
          std::fprintf(stderr, "cuDNN %s: engine %lld, workspace %lld bytes\n", what.c_str(), (long long)engine,
                       (long long)ws);
        return plan;
      }
      tried += "]";
    }
    fail(str("cuDNN has no execution plan for ", what, " (cuDNN ", cudnnGetVersion(), "):", tried,
             ". Run with CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr for cuDNN's reasons."));
  }

 private:
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    owned_.push_back(std::make_unique<Desc>(type));
    return owned_.back()->get();
  }
  void add_op(cudnnBackendDescriptor_t op) {
    HYTRA_CUDNN_CHECK(cudnnBackendFinalize(op));
    ops_.push_back(op);
  }
  static int64_t engine_index(cudnnBackendDescriptor_t cfg) {
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    int64_t n = 0, index = -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
        CUDNN_STATUS_SUCCESS)
      return -1;
    (void)cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
    return index;
  }
  static bool nondeterministic(cudnnBackendDescriptor_t cfg) {
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    int64_t n = 0;
    HYTRA_CUDNN_CHECK(
        cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
    HYTRA_CUDNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                               int64_t(notes.size()), &n, notes.data()));
    for (int64_t i = 0; i < n; ++i)
      if (notes[size_t(i)] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
    return false;
  }

  std::vector<std::unique_ptr<Desc>> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_uid_ = kFirstVirtual;
};

struct Shape4 {
  int64_t B, T, H, Hkv, D, Dv;  // D: the query-key head dim; Dv: the value (and output) head dim
};

// Strides of (B,T,heads,d) memory seen as (b, heads, s, d).
Dims bshd(const Shape4& s, int64_t heads, int64_t d) { return {s.T * heads * d, d, heads * d, 1}; }
// The same memory seen transposed as (b, heads, d, s).
Dims bshd_t(const Shape4& s, int64_t heads, int64_t d) { return {s.T * heads * d, d, 1, heads * d}; }

std::unique_ptr<Plan> build_fwd(cudnnHandle_t handle, const Shape4& s) {
  const int64_t B = s.B, T = s.T, H = s.H, Hkv = s.Hkv, D = s.D, Dv = s.Dv;
  GraphBuilder g;
  auto q = g.tensor(kQ, {B, H, T, D}, bshd(s, H, D), CUDNN_DATA_BFLOAT16);
  auto kt = g.tensor(kK, {B, Hkv, D, T}, bshd_t(s, Hkv, D), CUDNN_DATA_BFLOAT16);
  auto v = g.tensor(kV, {B, Hkv, T, Dv}, bshd(s, Hkv, Dv), CUDNN_DATA_BFLOAT16);
  auto o = g.tensor(kO, {B, H, T, Dv}, bshd(s, H, Dv), CUDNN_DATA_BFLOAT16);
  const Dims row_dims{B, H, T, 1}, row_strides{H * T, T, 1, 1};
  auto stats = g.tensor(kStats, row_dims, row_strides, CUDNN_DATA_FLOAT);
  auto scale = g.scalar(kScale);
  auto neg_inf = g.scalar(kNegInf);

  const Dims sd{B, H, T, T}, ss{H * T * T, T * T, T, 1};
  auto s0 = g.virt(sd, ss);
  g.matmul(q, kt, s0);
  auto s1 = g.binary(CUDNN_POINTWISE_MUL, s0, scale, sd, ss);
  auto s2 = g.causal_mask(s1, neg_inf, sd, ss);
  auto m = g.virt(row_dims, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s2, m);
  auto centred = g.binary(CUDNN_POINTWISE_SUB, s2, m, sd, ss);
  auto e = g.unary(CUDNN_POINTWISE_EXP, centred, sd, ss);
  auto z = g.virt(row_dims, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  auto logz = g.unary(CUDNN_POINTWISE_LOG, z, row_dims, row_strides);
  g.pointwise(CUDNN_POINTWISE_ADD, m, logz, nullptr, stats);
  auto p = g.binary(CUDNN_POINTWISE_DIV, e, z, sd, ss, CUDNN_DATA_BFLOAT16);  // bmm2's A is bf16
  g.matmul(p, v, o);
  return g.build(handle, false, str("attention_fwd B=", B, " T=", T, " H=", H, " Hkv=", Hkv, " D=", D, " Dv=", Dv));
}

std::unique_ptr<Plan> build_bwd(cudnnHandle_t handle, const Shape4& s) {
  const int64_t B = s.B, T = s.T, H = s.H, Hkv = s.Hkv, D = s.D, Dv = s.Dv;
  GraphBuilder g;
  auto q = g.tensor(kQ, {B, H, T, D}, bshd(s, H, D), CUDNN_DATA_BFLOAT16);
  auto kt = g.tensor(kK, {B, Hkv, D, T}, bshd_t(s, Hkv, D), CUDNN_DATA_BFLOAT16);
  auto vt = g.tensor(kV, {B, Hkv, Dv, T}, bshd_t(s, Hkv, Dv), CUDNN_DATA_BFLOAT16);
  auto o = g.tensor(kO, {B, H, T, Dv}, bshd(s, H, Dv), CUDNN_DATA_BFLOAT16);
  auto dout = g.tensor(kDO, {B, H, T, Dv}, bshd(s, H, Dv), CUDNN_DATA_BFLOAT16);
  auto dq = g.tensor(kDQ, {B, H, T, D}, bshd(s, H, D), CUDNN_DATA_BFLOAT16);
  auto dk = g.tensor(kDK, {B, Hkv, T, D}, bshd(s, Hkv, D), CUDNN_DATA_BFLOAT16);
  auto dv = g.tensor(kDV, {B, Hkv, T, Dv}, bshd(s, Hkv, Dv), CUDNN_DATA_BFLOAT16);
  const Dims row_dims{B, H, T, 1}, row_strides{H * T, T, 1, 1};
  auto stats = g.tensor(kStats, row_dims, row_strides, CUDNN_DATA_FLOAT);
  auto scale = g.scalar(kScale);
  auto neg_inf = g.scalar(kNegInf);
  auto one = g.scalar(kOne);
  auto softmax_sum = g.tensor(kSoftmaxSum, row_dims, row_strides, CUDNN_DATA_FLOAT);  // in our workspace

  // softmax_sum = rowsum(dO * O)
  const Dims hd{B, H, T, D}, hs{H * T * D, T * D, D, 1}, hdv{B, H, T, Dv}, hsv{H * T * Dv, T * Dv, Dv, 1};
  auto doo = g.binary(CUDNN_POINTWISE_MUL, dout, o, hdv, hsv);
  auto rowsum = g.virt(row_dims, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, doo, rowsum);
  g.pointwise(CUDNN_POINTWISE_MUL, rowsum, one, nullptr, softmax_sum);

  // E = exp(mask(scale * Q K^T - stats)); dV = E^T dO
  const Dims sd{B, H, T, T}, ss{H * T * T, T * T, T, 1}, sst{H * T * T, T * T, 1, T};
  auto s0 = g.virt(sd, ss);
  g.matmul(q, kt, s0);
  auto s1 = g.binary(CUDNN_POINTWISE_MUL, s0, scale, sd, ss);
  auto s2 = g.binary(CUDNN_POINTWISE_SUB, s1, stats, sd, ss);
  auto s3 = g.causal_mask(s2, neg_inf, sd, ss);
  auto e = g.unary(CUDNN_POINTWISE_EXP, s3, sd, ss);
  auto et = g.virt(sd, sst, CUDNN_DATA_BFLOAT16);
  g.reshape(e, et);
  if (H == Hkv) {
    g.matmul(et, dout, dv);
  } else {
    auto dv_full = g.virt(hdv, hsv, CUDNN_DATA_BFLOAT16);
    g.matmul(et, dout, dv_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
  }

  // dS = (dO V^T - softmax_sum) * E * scale; dK = dS^T Q; dQ = dS K
  auto dp = g.virt(sd, ss);
  g.matmul(dout, vt, dp);
  auto dp1 = g.binary(CUDNN_POINTWISE_SUB, dp, softmax_sum, sd, ss);
  auto dp2 = g.binary(CUDNN_POINTWISE_MUL, dp1, e, sd, ss);
  auto ds = g.binary(CUDNN_POINTWISE_MUL, dp2, scale, sd, ss);
  auto dst = g.virt(sd, sst, CUDNN_DATA_BFLOAT16);
  g.reshape(ds, dst);
  if (H == Hkv) {
    g.matmul(dst, q, dk);
  } else {
    auto dk_full = g.virt(hd, hs, CUDNN_DATA_BFLOAT16);
    g.matmul(dst, q, dk_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
  }
  auto k = g.virt({B, Hkv, T, D}, bshd(s, Hkv, D), CUDNN_DATA_BFLOAT16);
  g.reshape(kt, k);
  g.matmul(ds, k, dq);  // straight into dQ: the deterministic (dP-workspace) backward
  return g.build(handle, true, str("attention_bwd B=", B, " T=", T, " H=", H, " Hkv=", Hkv, " D=", D, " Dv=", Dv));
}

// Per host thread and device: a cuDNN handle and the plans built so far.
struct CudnnState {
  cudnnHandle_t handle = nullptr;
  std::map<std::array<int64_t, 7>, std::unique_ptr<Plan>> plans;  // (direction, B, T, H, Hkv, D, Dv)

  CudnnState() { HYTRA_CUDNN_CHECK(cudnnCreate(&handle)); }
  ~CudnnState() {  // at thread exit; errors ignored (the context may already be gone)
    plans.clear();
    (void)cudnnDestroy(handle);
  }
  CudnnState(const CudnnState&) = delete;
  CudnnState& operator=(const CudnnState&) = delete;
};

CudnnState& cudnn_state() {
  thread_local std::map<int, std::unique_ptr<CudnnState>> states;
  int device = 0;
  HYTRA_CUDA_CHECK(cudaGetDevice(&device));
  std::unique_ptr<CudnnState>& st = states[device];
  if (!st) st = std::make_unique<CudnnState>();
  return *st;
}

const Plan& plan_for(CudnnState& st, int64_t direction, const Shape4& s) {
  std::unique_ptr<Plan>& p = st.plans[{direction, s.B, s.T, s.H, s.Hkv, s.D, s.Dv}];
  if (!p) p = direction == 0 ? build_fwd(st.handle, s) : build_bwd(st.handle, s);
  return *p;
}

// Device scratch from hytra's caching allocator, returned when the call ends (one stream:
// later work on the stream is ordered after this call's kernels).
class Scratch {
 public:
  explicit Scratch(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) ptr_ = cuda_allocator().allocate(bytes_);
  }
  ~Scratch() {
    if (ptr_) cuda_allocator().deallocate(ptr_, bytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

void execute(CudnnState& st, Exec& ex, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, void* workspace) {
  HYTRA_CUDNN_CHECK(cudnnSetStream(st.handle, static_cast<cudaStream_t>(ex.stream())));
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  HYTRA_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  HYTRA_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()),
                  ptrs.data());
  HYTRA_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  HYTRA_CUDNN_CHECK(cudnnBackendFinalize(pack.get()));
  HYTRA_CUDNN_CHECK(cudnnBackendExecute(st.handle, plan.plan, pack.get()));
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

Shape4 shape_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0; }

// t is contiguous, on the GPU, of `dtype`, 16-byte aligned, with exactly `shape`.
bool fits(const Tensor& t, DType dtype, const Shape& shape) {
  return t.defined() && t.device() == Device::CUDA && t.dtype() == dtype && t.shape() == shape &&
         t.is_contiguous() && aligned16(t);
}

}  // namespace

bool cudnn_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), Dv = v.size(3);
  // Head dims of the dense models (64, 128) and of multi-latent attention (qk 192, v 128 or 192).
  const bool dims = (D == Dv && (D == 64 || D == 128)) || (D == 192 && (Dv == 128 || Dv == 192));
  if (B * T * H == 0 || Hkv == 0 || H % Hkv != 0 || !dims) return false;
  return fits(q, DType::BF16, {B, T, H, D}) && fits(k, DType::BF16, {B, T, Hkv, D}) &&
         fits(v, DType::BF16, {B, T, Hkv, Dv});
}

bool cudnn_attention_fwd_supported(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                   const Tensor& v) {
  return cudnn_attention_supported(q, k, v) && fits(out, DType::BF16, {q.size(0), q.size(1), q.size(2), v.size(3)}) &&
         fits(lse, DType::F32, {q.size(0), q.size(2), q.size(1)});
}

bool cudnn_attention_bwd_supported(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                   const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                   const Tensor& lse) {
  return cudnn_attention_fwd_supported(out, lse, q, k, v) && fits(dout, DType::BF16, out.shape()) &&
         fits(dq, DType::BF16, q.shape()) && fits(dk, DType::BF16, k.shape()) && fits(dv, DType::BF16, v.shape());
}

void cudnn_attention_fwd(Exec& ex, Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         double softmax_scale) {
  CudnnState& st = cudnn_state();
  const Plan& plan = plan_for(st, 0, shape_of(q, k, v));
  Scratch ws(align_up(size_t(plan.workspace)));
  float scale = float(softmax_scale), neg_inf = -std::numeric_limits<float>::infinity();
  execute(st, ex, plan, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
          {q.raw(), k.raw(), v.raw(), out.raw(), lse.raw(), &scale, &neg_inf}, ws.get());
}

void cudnn_attention_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                         double softmax_scale) {
  CudnnState& st = cudnn_state();
  const Shape4 s = shape_of(q, k, v);
  const Plan& plan = plan_for(st, 1, s);
  const size_t engine_ws = align_up(size_t(plan.workspace));
  Scratch ws(engine_ws + align_up(size_t(s.B * s.H * s.T) * sizeof(float)));  // engine's, then softmax_sum
  float scale = float(softmax_scale), neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  execute(st, ex, plan, {kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kNegInf, kOne, kSoftmaxSum},
          {q.raw(), k.raw(), v.raw(), out.raw(), lse.raw(), dout.raw(), dq.raw(), dk.raw(), dv.raw(), &scale,
           &neg_inf, &one, ws.get() + engine_ws},
          ws.get());
}

}  // namespace hytra::cuda
