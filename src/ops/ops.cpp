// ops:: dispatch: check devices, dtypes and shapes once (clear errors naming op and argument),
// then call the executor's backend.
#include "ops/ops.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "core/error.h"
#include "core/nvtx.h"
#include "ops/backend.h"

namespace hytra::ops {
namespace {

using Arg = std::pair<const char*, const Tensor*>;

// The backend, inside an NVTX range named after the op (--profile-nvtx, core/nvtx.h): `on(ex, "gemm")->gemm(...)`;
// the temporary, and so the range, ends with the call's full expression.
struct InRange {
  NvtxRange range;
  Backend& backend;
  Backend* operator->() const { return &backend; }
};
InRange on(const Exec& ex, const char* op) { return {NvtxRange(op), ex.backend()}; }

// Defined and on the executor's device (fp64 only on the CPU).
void check_placed(const Exec& ex, const char* op, const char* arg, const Tensor& t) {
  HYTRA_CHECK(t.defined(), op, ": argument '", arg, "' is undefined");
  HYTRA_CHECK(t.device() == ex.device(), op, ": argument '", arg, "' is on ", device_name(t.device()),
              " but the executor runs on ", device_name(ex.device()));
  HYTRA_CHECK(!(t.dtype() == DType::F64 && ex.device() == Device::CUDA), op, ": argument '", arg,
              "' is fp64, which only the CPU backend supports");
}

// Every tensor argument: placed and contiguous.
void check_arg(const Exec& ex, const char* op, const char* arg, const Tensor& t) {
  check_placed(ex, op, arg, t);
  HYTRA_CHECK(t.is_contiguous(), op, ": argument '", arg, "' must be contiguous, got ", t.desc());
}

// The arguments ops.def marks "row-pitched": placed, and contiguous or a column range of a wider
// tensor (Tensor::row_pitch: the last dim contiguous, the rows evenly spaced).
void check_pitched(const Exec& ex, const char* op, const char* arg, const Tensor& t) {
  check_placed(ex, op, arg, t);
  HYTRA_CHECK(t.row_pitch() >= 0, op, ": argument '", arg,
              "' must be contiguous or a column range of a wider tensor (evenly spaced rows), got ", t.desc(),
              " with strides ", shape_str(t.strides()));
}

void check_float(const char* op, const char* arg, const Tensor& t) {
  HYTRA_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' must be floating point, got ", t.desc());
}

void check_shape(const char* op, const char* arg, const Tensor& t, const Shape& want) {
  HYTRA_CHECK(t.shape() == want, op, ": argument '", arg, "' must have shape ", shape_str(want), ", got ", t.desc());
}

void check_same_dtype(const char* op, const char* arg, const Tensor& t, const Tensor& ref) {
  HYTRA_CHECK(t.dtype() == ref.dtype(), op, ": argument '", arg, "' must be ", dtype_name(ref.dtype()), ", got ",
              t.desc());
}

// Statistics (rstd, lse, loss...) are fp32, or fp64 alongside fp64 data.
void check_stat(const char* op, const char* arg, const Tensor& t, const Tensor& data, const Shape& want) {
  check_shape(op, arg, t, want);
  DType expect = data.dtype() == DType::F64 ? DType::F64 : DType::F32;
  HYTRA_CHECK(t.dtype() == expect, op, ": argument '", arg, "' must be ", dtype_name(expect), ", got ", t.desc());
}

void check_ids(const char* op, const char* arg, const Tensor& t, int64_t n) {
  HYTRA_CHECK(t.dtype() == DType::I32, op, ": argument '", arg, "' must be int32, got ", t.desc());
  check_shape(op, arg, t, {n});
}

void check_same_numel(const char* op, const char* arg, const Tensor& t, const Tensor& ref) {
  HYTRA_CHECK(t.numel() == ref.numel(), op, ": argument '", arg, "' has ", t.numel(), " elements, expected ",
              ref.numel());
}

}  // namespace

void gemm(Exec& ex, Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, float alpha, float beta) {
  const char* op = "gemm";
  check_arg(ex, op, "C", C);
  check_arg(ex, op, "A", A);
  check_arg(ex, op, "B", B);
  check_float(op, "A", A);
  check_same_dtype(op, "B", B, A);
  HYTRA_CHECK(C.dtype() == A.dtype() || (A.dtype() == DType::BF16 && C.dtype() == DType::F32), op, ": C must be ",
              dtype_name(A.dtype()), " (or fp32 for bf16 inputs), got ", C.desc());
  HYTRA_CHECK((A.dim() == 2 || A.dim() == 3) && B.dim() == A.dim() && C.dim() == A.dim(), op,
              ": A, B, C must all be 2-D or all 3-D, got ", A.desc(), ", ", B.desc(), ", ", C.desc());
  int64_t o = A.dim() - 2;
  if (o == 1)
    HYTRA_CHECK(A.size(0) == B.size(0) && A.size(0) == C.size(0), op, ": batch sizes differ: ", A.desc(), ", ",
                B.desc(), ", ", C.desc());
  int64_t M = trans_a ? A.size(o + 1) : A.size(o), K = trans_a ? A.size(o) : A.size(o + 1);
  int64_t Kb = trans_b ? B.size(o + 1) : B.size(o), N = trans_b ? B.size(o) : B.size(o + 1);
  HYTRA_CHECK(K == Kb, op, ": inner dims differ: op(A) is ", M, "x", K, ", op(B) is ", Kb, "x", N);
  HYTRA_CHECK(C.size(o) == M && C.size(o + 1) == N, op, ": C must be ", M, "x", N, ", got ", C.desc());
  on(ex, "gemm")->gemm(ex, C, A, B, trans_a, trans_b, alpha, beta);
}

void fill(Exec& ex, Tensor& y, double value) {
  check_arg(ex, "fill", "y", y);
  on(ex, "fill")->fill(ex, y, value);
}

void copy(Exec& ex, Tensor& y, const Tensor& x) {
  check_arg(ex, "copy", "y", y);
  check_arg(ex, "copy", "x", x);
  check_same_numel("copy", "y", y, x);
  on(ex, "copy")->copy(ex, y, x);
}

void add(Exec& ex, Tensor& y, const Tensor& a, const Tensor& b) {
  for (auto [n, t] : {Arg{"y", &y}, {"a", &a}, {"b", &b}}) {
    check_arg(ex, "add", n, *t);
    check_float("add", n, *t);
    check_same_numel("add", n, *t, y);
  }
  on(ex, "add")->add(ex, y, a, b);
}

void axpy(Exec& ex, Tensor& y, const Tensor& x, double alpha) {
  check_arg(ex, "axpy", "y", y);
  check_arg(ex, "axpy", "x", x);
  check_float("axpy", "y", y);
  check_float("axpy", "x", x);
  check_same_numel("axpy", "x", x, y);
  on(ex, "axpy")->axpy(ex, y, x, alpha);
}

void scale(Exec& ex, Tensor& y, double alpha) {
  check_arg(ex, "scale", "y", y);
  check_float("scale", "y", y);
  on(ex, "scale")->scale(ex, y, alpha);
}

namespace {
// The slice ops' shared check: y is the narrow part (copy) or x is (scatter); `big` holds the slice.
void check_slice(Exec& ex, const char* op, const Tensor& big, const char* big_name, const Tensor& part,
                 const char* part_name, int64_t dim, int64_t start) {
  check_arg(ex, op, big_name, big);
  check_arg(ex, op, part_name, part);
  check_same_dtype(op, part_name, part, big);
  HYTRA_CHECK(big.dim() == part.dim() && dim >= 0 && dim < big.dim(), op, ": dim ", dim, " must index both ",
              big.desc(), " and ", part.desc());
  for (int64_t d = 0; d < big.dim(); ++d)
    if (d != dim)
      HYTRA_CHECK(big.size(d) == part.size(d), op, ": ", part_name, " ", part.desc(), " and ", big_name, " ",
                  big.desc(), " differ outside dim ", dim);
  HYTRA_CHECK(start >= 0 && start + part.size(dim) <= big.size(dim), op, ": slice [", start, ", ",
              start + part.size(dim), ") is outside dim ", dim, " of ", big.desc());
}
}  // namespace

void slice_copy(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start) {
  check_slice(ex, "slice_copy", x, "x", y, "y", dim, start);
  on(ex, "slice_copy")->slice_copy(ex, y, x, dim, start);
}

void slice_scatter(Exec& ex, Tensor& y, const Tensor& x, int64_t dim, int64_t start) {
  check_slice(ex, "slice_scatter", y, "y", x, "x", dim, start);
  on(ex, "slice_scatter")->slice_scatter(ex, y, x, dim, start);
}

void sum(Exec& ex, Tensor& out, const Tensor& x) {
  check_arg(ex, "sum", "out", out);
  check_arg(ex, "sum", "x", x);
  check_float("sum", "x", x);
  check_stat("sum", "out", out, x, {1});
  on(ex, "sum")->sum(ex, out, x);
}

void sum_squares(Exec& ex, Tensor& out, const Tensor& x) {
  check_arg(ex, "sum_squares", "out", out);
  check_arg(ex, "sum_squares", "x", x);
  check_float("sum_squares", "x", x);
  check_stat("sum_squares", "out", out, x, {1});
  on(ex, "sum_squares")->sum_squares(ex, out, x);
}

void count_zeros(Exec& ex, Tensor& out, const Tensor& x) {
  check_arg(ex, "count_zeros", "out", out);
  check_arg(ex, "count_zeros", "x", x);
  check_float("count_zeros", "x", x);
  check_shape("count_zeros", "out", out, {1});
  HYTRA_CHECK(out.dtype() == DType::I64, "count_zeros: argument 'out' must be int64, got ", out.desc());
  on(ex, "count_zeros")->count_zeros(ex, out, x);
}

void embedding_fwd(Exec& ex, Tensor& y, const Tensor& ids, const Tensor& table) {
  const char* op = "embedding_fwd";
  check_arg(ex, op, "y", y);
  check_arg(ex, op, "ids", ids);
  check_arg(ex, op, "table", table);
  check_float(op, "table", table);
  HYTRA_CHECK(table.dim() == 2, op, ": table must be (V,C), got ", table.desc());
  check_ids(op, "ids", ids, ids.numel());
  check_shape(op, "y", y, {ids.numel(), table.size(1)});
  check_same_dtype(op, "y", y, table);
  on(ex, "embedding_fwd")->embedding_fwd(ex, y, ids, table);
}

void embedding_bwd(Exec& ex, Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  const char* op = "embedding_bwd";
  check_arg(ex, op, "dtable", dtable);
  check_arg(ex, op, "dy", dy);
  check_arg(ex, op, "ids", ids);
  HYTRA_CHECK(dtable.dim() == 2, op, ": dtable must be (V,C), got ", dtable.desc());
  check_ids(op, "ids", ids, ids.numel());
  check_shape(op, "dy", dy, {ids.numel(), dtable.size(1)});
  check_float(op, "dy", dy);
  check_float(op, "dtable", dtable);
  on(ex, "embedding_bwd")->embedding_bwd(ex, dtable, dy, ids);
}

namespace {
void check_rows(const char* op, const Tensor& x, int64_t& N, int64_t& C) {
  HYTRA_CHECK(x.dim() == 2, op, ": x must be (N,C), got ", x.desc());
  N = x.size(0);
  C = x.size(1);
}
}  // namespace

void rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps) {
  const char* op = "rmsnorm_fwd";
  for (auto [n, t] : {Arg{"y", &y}, {"rstd", &rstd}, {"x", &x}, {"w", &w}}) check_arg(ex, op, n, *t);
  int64_t N, C;
  check_rows(op, x, N, C);
  check_float(op, "x", x);
  check_shape(op, "y", y, {N, C});
  check_same_dtype(op, "y", y, x);
  check_shape(op, "w", w, {C});
  check_float(op, "w", w);
  check_stat(op, "rstd", rstd, x, {N});
  on(ex, "rmsnorm_fwd")->rmsnorm_fwd(ex, y, rstd, x, w, eps);
}

void rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd) {
  const char* op = "rmsnorm_bwd";
  for (auto [n, t] : {Arg{"dx", &dx}, {"dw", &dw}, {"dy", &dy}, {"x", &x}, {"w", &w}, {"rstd", &rstd}})
    check_arg(ex, op, n, *t);
  int64_t N, C;
  check_rows(op, x, N, C);
  check_shape(op, "dx", dx, {N, C});
  check_shape(op, "dy", dy, {N, C});
  check_shape(op, "w", w, {C});
  check_shape(op, "dw", dw, {C});
  check_float(op, "dw", dw);
  check_stat(op, "rstd", rstd, x, {N});
  on(ex, "rmsnorm_bwd")->rmsnorm_bwd(ex, dx, dw, dy, x, w, rstd);
}

void add_rmsnorm_fwd(Exec& ex, Tensor& sum, Tensor& y, Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w,
                     double eps) {
  const char* op = "add_rmsnorm_fwd";
  for (auto [n, t] : {Arg{"sum", &sum}, {"y", &y}, {"rstd", &rstd}, {"a", &a}, {"b", &b}, {"w", &w}})
    check_arg(ex, op, n, *t);
  int64_t N, C;
  HYTRA_CHECK(a.dim() == 2, op, ": a must be (N,C), got ", a.desc());
  check_rows(op, a, N, C);
  check_float(op, "a", a);
  for (auto [n, t] : {Arg{"b", &b}, {"sum", &sum}, {"y", &y}}) {
    check_shape(op, n, *t, {N, C});
    check_same_dtype(op, n, *t, a);
  }
  check_shape(op, "w", w, {C});
  check_float(op, "w", w);
  check_stat(op, "rstd", rstd, a, {N});
  for (auto [n, t] : {Arg{"sum", &sum}, {"a", &a}, {"b", &b}})
    HYTRA_CHECK(y.raw() != t->raw() || N * C == 0, op, ": y must not alias '", n, "'");
  HYTRA_CHECK(sum.raw() != b.raw() || a.raw() == b.raw() || N * C == 0, op,
              ": sum may alias a, not b (pass the aliased operand as a)");
  on(ex, "add_rmsnorm_fwd")->add_rmsnorm_fwd(ex, sum, y, rstd, a, b, w, eps);
}

void rmsnorm_bwd_add(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                     const Tensor& rstd, const Tensor& dres) {
  const char* op = "rmsnorm_bwd_add";
  for (auto [n, t] : {Arg{"dx", &dx}, {"dw", &dw}, {"dy", &dy}, {"x", &x}, {"w", &w}, {"rstd", &rstd}, {"dres", &dres}})
    check_arg(ex, op, n, *t);
  int64_t N, C;
  check_rows(op, x, N, C);
  check_float(op, "x", x);
  for (auto [n, t] : {Arg{"dx", &dx}, {"dy", &dy}, {"dres", &dres}}) {
    check_shape(op, n, *t, {N, C});
    check_float(op, n, *t);
  }
  check_shape(op, "w", w, {C});
  check_float(op, "w", w);
  check_shape(op, "dw", dw, {C});
  check_float(op, "dw", dw);
  check_stat(op, "rstd", rstd, x, {N});
  for (auto [n, t] : {Arg{"dy", &dy}, {"x", &x}})
    HYTRA_CHECK(dx.raw() != t->raw() || N * C == 0, op, ": dx must not alias '", n, "' (it may alias dres)");
  on(ex, "rmsnorm_bwd_add")->rmsnorm_bwd_add(ex, dx, dw, dy, x, w, rstd, dres);
}

void layernorm_fwd(Exec& ex, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                   double eps) {
  const char* op = "layernorm_fwd";
  for (auto [n, t] : {Arg{"y", &y}, {"mean", &mean}, {"rstd", &rstd}, {"x", &x}, {"w", &w}}) check_arg(ex, op, n, *t);
  int64_t N, C;
  check_rows(op, x, N, C);
  check_float(op, "x", x);
  check_shape(op, "y", y, {N, C});
  check_same_dtype(op, "y", y, x);
  check_shape(op, "w", w, {C});
  if (b.defined()) {
    check_arg(ex, op, "b", b);
    check_shape(op, "b", b, {C});
    check_same_dtype(op, "b", b, w);
  }
  check_stat(op, "mean", mean, x, {N});
  check_stat(op, "rstd", rstd, x, {N});
  on(ex, "layernorm_fwd")->layernorm_fwd(ex, y, mean, rstd, x, w, b, eps);
}

void layernorm_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_bwd";
  for (auto [n, t] : {Arg{"dx", &dx}, {"dw", &dw}, {"dy", &dy}, {"x", &x}, {"w", &w}, {"mean", &mean}, {"rstd", &rstd}})
    check_arg(ex, op, n, *t);
  int64_t N, C;
  check_rows(op, x, N, C);
  check_shape(op, "dx", dx, {N, C});
  check_shape(op, "dy", dy, {N, C});
  check_shape(op, "dw", dw, {C});
  if (db.defined()) {
    check_arg(ex, op, "db", db);
    check_shape(op, "db", db, {C});
  }
  check_stat(op, "mean", mean, x, {N});
  check_stat(op, "rstd", rstd, x, {N});
  on(ex, "layernorm_bwd")->layernorm_bwd(ex, dx, dw, db, dy, x, w, mean, rstd);
}

namespace {
void check_rope(Exec& ex, const char* op, const Tensor& out, const Tensor& in, int64_t rotary_dim) {
  check_arg(ex, op, "out", out);
  check_arg(ex, op, "in", in);
  check_float(op, "in", in);
  HYTRA_CHECK(in.dim() == 4, op, ": input must be (B,T,H,D), got ", in.desc());
  check_shape(op, "out", out, in.shape());
  check_same_dtype(op, "out", out, in);
  HYTRA_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= in.size(3), op,
              ": rotary_dim must be even and in (0, D=", in.size(3), "], got ", rotary_dim);
}
}  // namespace

// ---- gated RMSNorm --------------------------------------------------------------------------------

void gated_rmsnorm_fwd(Exec& ex, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w,
                       int64_t group_size, double eps, bool norm_before_gate) {
  const char* op = "gated_rmsnorm_fwd";
  for (auto [n, t] : {Arg{"y", &y}, {"rstd", &rstd}, {"x", &x}, {"w", &w}}) check_arg(ex, op, n, *t);
  check_pitched(ex, op, "z", z);
  int64_t N, C;
  check_rows(op, x, N, C);
  check_float(op, "x", x);
  HYTRA_CHECK(group_size > 0 && C % group_size == 0, op, ": group_size must divide C = ", C, ", got ", group_size);
  for (auto [n, t] : {Arg{"z", &z}, {"y", &y}}) {
    check_shape(op, n, *t, {N, C});
    check_same_dtype(op, n, *t, x);
  }
  HYTRA_CHECK(w.shape() == Shape{C} || w.shape() == Shape{group_size}, op, ": w must be (", C, ") or (", group_size,
              "), got ", w.desc());
  check_same_dtype(op, "w", w, x);
  check_stat(op, "rstd", rstd, x, {N, C / group_size});
  on(ex, "gated_rmsnorm_fwd")->gated_rmsnorm_fwd(ex, y, rstd, x, z, w, group_size, eps, norm_before_gate);
}

void gated_rmsnorm_bwd(Exec& ex, Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& z,
                       const Tensor& w, const Tensor& rstd, int64_t group_size, bool norm_before_gate) {
  const char* op = "gated_rmsnorm_bwd";
  for (auto [n, t] : {Arg{"dx", &dx}, {"dw", &dw}, {"dy", &dy}, {"x", &x}, {"w", &w}, {"rstd", &rstd}})
    check_arg(ex, op, n, *t);
  for (auto [n, t] : {Arg{"dz", &dz}, {"z", &z}}) check_pitched(ex, op, n, *t);
  int64_t N, C;
  check_rows(op, x, N, C);
  check_float(op, "x", x);
  HYTRA_CHECK(group_size > 0 && C % group_size == 0, op, ": group_size must divide C = ", C, ", got ", group_size);
  for (auto [n, t] : {Arg{"dx", &dx}, {"dz", &dz}, {"dy", &dy}, {"z", &z}}) {
    check_shape(op, n, *t, {N, C});
    check_same_dtype(op, n, *t, x);
  }
  HYTRA_CHECK(w.shape() == Shape{C} || w.shape() == Shape{group_size}, op, ": w must be (", C, ") or (", group_size,
              "), got ", w.desc());
  check_same_dtype(op, "w", w, x);
  check_stat(op, "dw", dw, x, w.shape());
  check_stat(op, "rstd", rstd, x, {N, C / group_size});
  on(ex, "gated_rmsnorm_bwd")->gated_rmsnorm_bwd(ex, dx, dz, dw, dy, x, z, w, rstd, group_size, norm_before_gate);
}

void rope_fwd(Exec& ex, Tensor& y, const Tensor& x, int64_t rotary_dim, double base, bool interleaved) {
  check_rope(ex, "rope_fwd", y, x, rotary_dim);
  on(ex, "rope_fwd")->rope_fwd(ex, y, x, rotary_dim, base, interleaved);
}

void rope_bwd(Exec& ex, Tensor& dx, const Tensor& dy, int64_t rotary_dim, double base, bool interleaved) {
  check_rope(ex, "rope_bwd", dx, dy, rotary_dim);
  on(ex, "rope_bwd")->rope_bwd(ex, dx, dy, rotary_dim, base, interleaved);
}

namespace {
// Q, K (B,T,H,dr+dn), V (B,T,H,Dv) with Dv >= dv, q (B,T,H*(dn+dr)), kv (B,T,H*(dn+dv)), k_pe (B,T,dr), one
// dtype (the forward's names; the backward's are their gradients').
void check_mla_qkv(Exec& ex, const char* op, const std::array<const char*, 6>& names, const Tensor& Q, const Tensor& K,
                   const Tensor& V, const Tensor& q, const Tensor& kv, const Tensor& k_pe, const Rotary& rot) {
  const Tensor* ts[] = {&Q, &K, &V, &q, &kv, &k_pe};
  for (size_t i = 0; i < names.size(); ++i) check_arg(ex, op, names[i], *ts[i]);
  check_float(op, names[3], q);
  HYTRA_CHECK(Q.dim() == 4 && k_pe.dim() == 3 && V.dim() == 4 && kv.dim() == 3, op, ": ", names[0], " and ", names[2],
              " must be (B,T,H,dim), ", names[5], " and ", names[4], " (B,T,dim), got ", Q.desc(), ", ", V.desc(), ", ",
              k_pe.desc(), ", ", kv.desc());
  const int64_t B = Q.size(0), T = Q.size(1), H = Q.size(2), D = Q.size(3), dr = k_pe.size(2), dn = D - dr;
  HYTRA_CHECK(H > 0 && dr > 0 && dr % 2 == 0 && dn > 0 && kv.size(2) % H == 0 && kv.size(2) / H > dn, op,
              ": expected an even rope width ", dr, " below the head dim ", D, " and ", names[4],
              "'s width a multiple of H = ", H, " above H x dn = ", H * dn, ", got ", kv.desc());
  const int64_t dv = kv.size(2) / H - dn;
  HYTRA_CHECK(V.size(3) >= dv, op, ": ", names[2], "'s head dim must be at least dv = ", dv, ", got ", V.desc());
  check_shape(op, names[1], K, Q.shape());
  check_shape(op, names[2], V, {B, T, H, V.size(3)});
  check_shape(op, names[3], q, {B, T, H * D});
  check_shape(op, names[4], kv, {B, T, H * (dn + dv)});
  check_shape(op, names[5], k_pe, {B, T, dr});
  for (size_t i = 0; i < names.size(); ++i) check_same_dtype(op, names[i], *ts[i], q);
  HYTRA_CHECK(rot.factor > 0 && rot.high > rot.low && rot.first_position >= 0, op,
              ": expected factor > 0, high > low and a non-negative first position, got factor ", rot.factor, ", low ",
              rot.low, ", high ", rot.high, ", first position ", rot.first_position);
}
}  // namespace

void mla_qkv_fwd(Exec& ex, Tensor& Q, Tensor& K, Tensor& V, const Tensor& q, const Tensor& kv, const Tensor& k_pe,
                 const Rotary& rot) {
  check_mla_qkv(ex, "mla_qkv_fwd", {"Q", "K", "V", "q", "kv", "k_pe"}, Q, K, V, q, kv, k_pe, rot);
  on(ex, "mla_qkv_fwd")->mla_qkv_fwd(ex, Q, K, V, q, kv, k_pe, rot);
}

void mla_qkv_bwd(Exec& ex, Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Tensor& dQ, const Tensor& dK, const Tensor& dV,
                 const Rotary& rot) {
  const char* op = "mla_qkv_bwd";
  check_mla_qkv(ex, op, {"dQ", "dK", "dV", "dq", "dkv", "dk_pe"}, dQ, dK, dV, dq, dkv, dk_pe, rot);
  HYTRA_CHECK(rot.first_position == 0, op, ": the backward starts at position 0, got ", rot.first_position);
  on(ex, op)->mla_qkv_bwd(ex, dq, dkv, dk_pe, dQ, dK, dV, rot);
}

namespace {
// q (B,T,H,D), k and v (B,T,Hkv,D), qkv (B,T,Hkv*(H/Hkv+2)*D), one dtype; rotary_dim as rope.
void check_qkv_rope(Exec& ex, const char* op, const char* qkv_name, const Tensor& qkv, const Tensor& q, const Tensor& k,
                    const Tensor& v, int64_t rotary_dim) {
  for (auto [n, t] : {Arg{qkv_name, &qkv}, {"q", &q}, {"k", &k}, {"v", &v}}) check_arg(ex, op, n, *t);
  check_float(op, qkv_name, qkv);
  HYTRA_CHECK(q.dim() == 4 && k.dim() == 4, op, ": q and k must be (B,T,H,D) and (B,T,Hkv,D), got ", q.desc(), ", ",
              k.desc());
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2);
  HYTRA_CHECK(Hkv > 0 && H % Hkv == 0, op, ": query heads (", H, ") must be a multiple of kv heads (", Hkv, ")");
  check_shape(op, "k", k, {B, T, Hkv, D});
  check_shape(op, "v", v, {B, T, Hkv, D});
  check_shape(op, qkv_name, qkv, {B, T, (H + 2 * Hkv) * D});
  for (auto [n, t] : {Arg{"q", &q}, {"k", &k}, {"v", &v}}) check_same_dtype(op, n, *t, qkv);
  HYTRA_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= D, op,
              ": rotary_dim must be even and in (0, D=", D, "], got ", rotary_dim);
}
}  // namespace

void qkv_rope_fwd(Exec& ex, Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, int64_t rotary_dim, double base,
                  bool interleaved) {
  check_qkv_rope(ex, "qkv_rope_fwd", "qkv", qkv, q, k, v, rotary_dim);
  on(ex, "qkv_rope_fwd")->qkv_rope_fwd(ex, q, k, v, qkv, rotary_dim, base, interleaved);
}

void qkv_rope_bwd(Exec& ex, Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t rotary_dim,
                  double base, bool interleaved) {
  check_qkv_rope(ex, "qkv_rope_bwd", "dqkv", dqkv, dq, dk, dv, rotary_dim);
  on(ex, "qkv_rope_bwd")->qkv_rope_bwd(ex, dqkv, dq, dk, dv, rotary_dim, base, interleaved);
}

namespace {
void check_attention(Exec& ex, const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                     const Tensor& lse) {
  for (auto [n, t] : {Arg{"q", &q}, {"k", &k}, {"v", &v}, {"out", &o}, {"lse", &lse}}) check_arg(ex, op, n, *t);
  check_float(op, "q", q);
  HYTRA_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q, k and v must be (B,T,heads,dim), got ", q.desc(),
              ", ", k.desc(), ", ", v.desc());
  int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), Dv = v.size(3);
  check_shape(op, "k", k, {B, T, Hkv, D});
  check_shape(op, "v", v, {B, T, Hkv, Dv});
  check_shape(op, "out", o, {B, T, H, Dv});
  HYTRA_CHECK(Hkv > 0 && H % Hkv == 0, op, ": query heads (", H, ") must be a multiple of kv heads (", Hkv, ")");
  for (auto [n, t] : {Arg{"k", &k}, {"v", &v}, {"out", &o}}) check_same_dtype(op, n, *t, q);
  check_stat(op, "lse", lse, q, {B, H, T});
}
}  // namespace

void attention_fwd(Exec& ex, Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                   double softmax_scale) {
  check_attention(ex, "attention_fwd", q, k, v, out, lse);
  on(ex, "attention_fwd")->attention_fwd(ex, out, lse, q, k, v, softmax_scale);
}

void attention_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, double softmax_scale) {
  const char* op = "attention_bwd";
  check_attention(ex, op, q, k, v, out, lse);
  for (auto [n, t] : {Arg{"dq", &dq}, {"dk", &dk}, {"dv", &dv}, {"dout", &dout}}) check_arg(ex, op, n, *t);
  check_shape(op, "dq", dq, q.shape());
  check_shape(op, "dout", dout, out.shape());
  check_shape(op, "dk", dk, k.shape());
  check_shape(op, "dv", dv, v.shape());
  on(ex, "attention_bwd")->attention_bwd(ex, dq, dk, dv, dout, q, k, v, out, lse, softmax_scale);
}

// ---- conv1d, SSD scan, gated delta rule -----------------------------------------------------------
namespace {
void check_act(Exec& ex, const char* op, const char* n, const Tensor& t, const Tensor& like, const Shape& shape) {
  check_arg(ex, op, n, t);
  check_shape(op, n, t, shape);
  check_same_dtype(op, n, t, like);
}
// Small fp32 parameters of the scans (fp64 alongside fp64 activations).
void check_small_param(Exec& ex, const char* op, const char* n, const Tensor& t, const Tensor& like, int64_t len) {
  check_arg(ex, op, n, t);
  check_stat(op, n, t, like, {len});
}
void check_conv1d(Exec& ex, const char* op, const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_pitched(ex, op, "x", x);
  check_float(op, "x", x);
  HYTRA_CHECK(x.dim() == 3, op, ": x must be (B,T,C), got ", x.desc());
  HYTRA_CHECK(w.dim() == 2 && w.size(0) == x.size(2) && w.size(1) >= 1, op, ": w must be (", x.size(2), ",K), got ",
              w.desc());
  check_act(ex, op, "w", w, x, w.shape());
  check_act(ex, op, "bias", bias, x, {x.size(2)});
}
// x (B,T,H,P), dt_raw (B,T,H), Bm/Cm (B,T,G,N) with H % G == 0; the fp32 parameters (H).
void check_ssd(Exec& ex, const char* op, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
               const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size) {
  check_arg(ex, op, "x", x);
  check_float(op, "x", x);
  HYTRA_CHECK(x.dim() == 4, op, ": x must be (B,T,H,P), got ", x.desc());
  HYTRA_CHECK(Bm.dim() == 4, op, ": Bm must be (B,T,G,N), got ", Bm.desc());
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), G = Bm.size(2), N = Bm.size(3);
  HYTRA_CHECK(G > 0 && H % G == 0, op, ": heads H = ", H, " must be a multiple of groups G = ", G);
  HYTRA_CHECK(chunk_size > 0, op, ": chunk_size must be positive, got ", chunk_size);
  check_pitched(ex, op, "dt_raw", dt_raw);  // may be a column of the Mamba in_proj output
  check_shape(op, "dt_raw", dt_raw, {B, T, H});
  check_same_dtype(op, "dt_raw", dt_raw, x);
  check_act(ex, op, "Bm", Bm, x, {B, T, G, N});
  check_act(ex, op, "Cm", Cm, x, {B, T, G, N});
  for (auto [n, t] : {Arg{"dt_bias", &dt_bias}, {"A_log", &A_log}, {"D", &D}}) check_small_param(ex, op, n, *t, x, H);
}
// q, k (B,T,Hk,dk), v (B,T,Hv,dv) with Hv % Hk == 0, alpha/beta_raw (B,T,Hv); A_log, dt_bias (Hv).
void check_gdn(Exec& ex, const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
               const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size) {
  check_arg(ex, op, "q", q);
  check_float(op, "q", q);
  HYTRA_CHECK(q.dim() == 4, op, ": q must be (B,T,Hk,dk), got ", q.desc());
  HYTRA_CHECK(v.dim() == 4, op, ": v must be (B,T,Hv,dv), got ", v.desc());
  const int64_t B = q.size(0), T = q.size(1), Hk = q.size(2), Hv = v.size(2);
  HYTRA_CHECK(Hv % Hk == 0, op, ": value heads Hv = ", Hv, " must be a multiple of key heads Hk = ", Hk);
  HYTRA_CHECK(chunk_size > 0, op, ": chunk_size must be positive, got ", chunk_size);
  check_act(ex, op, "k", k, q, q.shape());
  check_act(ex, op, "v", v, q, {B, T, Hv, v.size(3)});
  check_act(ex, op, "alpha", alpha, q, {B, T, Hv});
  check_act(ex, op, "beta_raw", beta_raw, q, {B, T, Hv});
  check_small_param(ex, op, "A_log", A_log, q, Hv);
  check_small_param(ex, op, "dt_bias", dt_bias, q, Hv);
}
}  // namespace

void conv1d_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  check_conv1d(ex, "conv1d_fwd", x, w, bias);
  check_pitched(ex, "conv1d_fwd", "y", y);
  check_shape("conv1d_fwd", "y", y, x.shape());
  check_same_dtype("conv1d_fwd", "y", y, x);
  on(ex, "conv1d_fwd")->conv1d_fwd(ex, y, x, w, bias, silu);
}

void conv1d_bwd(Exec& ex, Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x, const Tensor& w,
                const Tensor& bias, bool silu) {
  const char* op = "conv1d_bwd";
  check_conv1d(ex, op, x, w, bias);
  for (auto [n, t] : {Arg{"dx", &dx}, {"dy", &dy}}) {
    check_pitched(ex, op, n, *t);
    check_shape(op, n, *t, x.shape());
    check_same_dtype(op, n, *t, x);
  }
  check_arg(ex, op, "dw", dw);
  check_stat(op, "dw", dw, x, w.shape());
  check_arg(ex, op, "dbias", dbias);
  check_stat(op, "dbias", dbias, x, bias.shape());
  on(ex, "conv1d_bwd")->conv1d_bwd(ex, dx, dw, dbias, dy, x, w, bias, silu);
}

void ssd_chunk_scan_fwd(Exec& ex, Tensor& y, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm, const Tensor& Cm,
                        const Tensor& dt_bias, const Tensor& A_log, const Tensor& D, int64_t chunk_size,
                        std::vector<Tensor>* keep) {
  check_ssd(ex, "ssd_chunk_scan_fwd", x, dt_raw, Bm, Cm, dt_bias, A_log, D, chunk_size);
  check_act(ex, "ssd_chunk_scan_fwd", "y", y, x, x.shape());
  if (keep != nullptr) keep->clear();
  on(ex, "ssd_chunk_scan_fwd")->ssd_chunk_scan_fwd(ex, y, x, dt_raw, Bm, Cm, dt_bias, A_log, D, chunk_size, keep);
}

void ssd_chunk_scan_bwd(Exec& ex, Tensor& dx, Tensor& ddt_raw, Tensor& dB, Tensor& dC, Tensor& ddt_bias, Tensor& dA_log,
                        Tensor& dD, const Tensor& dy, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm,
                        const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D,
                        int64_t chunk_size, const std::vector<Tensor>* kept) {
  const char* op = "ssd_chunk_scan_bwd";
  check_ssd(ex, op, x, dt_raw, Bm, Cm, dt_bias, A_log, D, chunk_size);
  check_act(ex, op, "dy", dy, x, x.shape());
  check_act(ex, op, "dx", dx, x, x.shape());
  check_pitched(ex, op, "ddt_raw", ddt_raw);
  check_shape(op, "ddt_raw", ddt_raw, dt_raw.shape());
  check_same_dtype(op, "ddt_raw", ddt_raw, x);
  check_act(ex, op, "dB", dB, x, Bm.shape());
  check_act(ex, op, "dC", dC, x, Cm.shape());
  for (auto [n, t] : {Arg{"ddt_bias", &ddt_bias}, {"dA_log", &dA_log}, {"dD", &dD}})
    check_small_param(ex, op, n, *t, x, x.size(2));
  on(ex, "ssd_chunk_scan_bwd")
      ->ssd_chunk_scan_bwd(ex, dx, ddt_raw, dB, dC, ddt_bias, dA_log, dD, dy, x, dt_raw, Bm, Cm, dt_bias, A_log, D,
                           chunk_size, kept != nullptr && !kept->empty() ? kept : nullptr);
}

void gated_delta_rule_fwd(Exec& ex, Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& alpha,
                          const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias, int64_t chunk_size) {
  check_gdn(ex, "gated_delta_rule_fwd", q, k, v, alpha, beta_raw, A_log, dt_bias, chunk_size);
  check_act(ex, "gated_delta_rule_fwd", "o", o, q, v.shape());
  on(ex, "gated_delta_rule_fwd")->gated_delta_rule_fwd(ex, o, q, k, v, alpha, beta_raw, A_log, dt_bias, chunk_size);
}

void gated_delta_rule_bwd(Exec& ex, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dalpha, Tensor& dbeta_raw,
                          Tensor& dA_log, Tensor& ddt_bias, const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log,
                          const Tensor& dt_bias, int64_t chunk_size) {
  const char* op = "gated_delta_rule_bwd";
  check_gdn(ex, op, q, k, v, alpha, beta_raw, A_log, dt_bias, chunk_size);
  check_act(ex, op, "dout", dout, q, v.shape());
  check_act(ex, op, "dq", dq, q, q.shape());
  check_act(ex, op, "dk", dk, q, k.shape());
  check_act(ex, op, "dv", dv, q, v.shape());
  check_act(ex, op, "dalpha", dalpha, q, alpha.shape());
  check_act(ex, op, "dbeta_raw", dbeta_raw, q, beta_raw.shape());
  check_small_param(ex, op, "dA_log", dA_log, q, v.size(2));
  check_small_param(ex, op, "ddt_bias", ddt_bias, q, v.size(2));
  on(ex, "gated_delta_rule_bwd")
      ->gated_delta_rule_bwd(ex, dq, dk, dv, dalpha, dbeta_raw, dA_log, ddt_bias, dout, q, k, v, alpha, beta_raw, A_log,
                             dt_bias, chunk_size);
}

// ---- one-token decoding ------------------------------------------------------------------------------

void attention_decode(Exec& ex, Tensor& out, Tensor& k_cache, Tensor& v_cache, const Tensor& q, const Tensor& k,
                      const Tensor& v, int64_t position, double softmax_scale, int64_t rotary_dim, double rotary_base,
                      bool interleaved) {
  const char* op = "attention_decode";
  check_arg(ex, op, "q", q);
  check_float(op, "q", q);
  HYTRA_CHECK(q.dim() == 3 && k.dim() == 3, op, ": q must be (B,H,D) and k (B,Hkv,D), got ", q.desc(), " and ",
              k.desc());
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), G = k.size(1);
  HYTRA_CHECK(G > 0 && H % G == 0, op, ": query heads H = ", H, " must be a multiple of KV heads Hkv = ", G);
  check_act(ex, op, "k", k, q, {B, G, D});
  check_act(ex, op, "v", v, q, {B, G, D});
  check_act(ex, op, "out", out, q, q.shape());
  HYTRA_CHECK(k_cache.dim() == 4, op, ": k_cache must be (B,S,Hkv,D), got ", k_cache.desc());
  const int64_t S = k_cache.size(1);
  check_act(ex, op, "k_cache", k_cache, q, {B, S, G, D});
  check_act(ex, op, "v_cache", v_cache, q, {B, S, G, D});
  HYTRA_CHECK(position >= 0 && position < S, op, ": position ", position, " must be in [0, ", S,
              ") (the caches' length)");
  HYTRA_CHECK(rotary_dim >= 0 && rotary_dim <= D && rotary_dim % 2 == 0, op, ": rotary_dim must be even and in [0, ", D,
              "], got ", rotary_dim);
  on(ex, op)->attention_decode(ex, out, k_cache, v_cache, q, k, v, position, softmax_scale, rotary_dim, rotary_base,
                               interleaved);
}

void conv1d_step(Exec& ex, Tensor& y, Tensor& state, const Tensor& x, const Tensor& w, const Tensor& bias, bool silu) {
  const char* op = "conv1d_step";
  check_arg(ex, op, "x", x);
  check_float(op, "x", x);
  HYTRA_CHECK(x.dim() == 2, op, ": x must be (B,C), got ", x.desc());
  const int64_t B = x.size(0), C = x.size(1);
  HYTRA_CHECK(w.dim() == 2 && w.size(0) == C && w.size(1) >= 2, op, ": w must be (", C, ",K) with K >= 2, got ",
              w.desc());
  check_act(ex, op, "w", w, x, w.shape());
  check_act(ex, op, "bias", bias, x, {C});
  check_act(ex, op, "y", y, x, x.shape());
  check_act(ex, op, "state", state, x, {B, w.size(1) - 1, C});
  on(ex, op)->conv1d_step(ex, y, state, x, w, bias, silu);
}

void ssd_step(Exec& ex, Tensor& y, Tensor& state, const Tensor& x, const Tensor& dt_raw, const Tensor& Bm,
              const Tensor& Cm, const Tensor& dt_bias, const Tensor& A_log, const Tensor& D) {
  const char* op = "ssd_step";
  check_arg(ex, op, "x", x);
  check_float(op, "x", x);
  HYTRA_CHECK(x.dim() == 3 && Bm.dim() == 3, op, ": x must be (B,H,P) and Bm (B,G,N), got ", x.desc(), " and ",
              Bm.desc());
  const int64_t B = x.size(0), H = x.size(1), P = x.size(2), G = Bm.size(1), N = Bm.size(2);
  HYTRA_CHECK(G > 0 && H % G == 0, op, ": heads H = ", H, " must be a multiple of groups G = ", G);
  check_act(ex, op, "y", y, x, x.shape());
  check_act(ex, op, "dt_raw", dt_raw, x, {B, H});
  check_act(ex, op, "Bm", Bm, x, {B, G, N});
  check_act(ex, op, "Cm", Cm, x, {B, G, N});
  check_arg(ex, op, "state", state);
  check_stat(op, "state", state, x, {B, H, P, N});
  check_small_param(ex, op, "dt_bias", dt_bias, x, H);
  check_small_param(ex, op, "A_log", A_log, x, H);
  check_small_param(ex, op, "D", D, x, H);
  on(ex, op)->ssd_step(ex, y, state, x, dt_raw, Bm, Cm, dt_bias, A_log, D);
}

void gdn_step(Exec& ex, Tensor& o, Tensor& state, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& alpha, const Tensor& beta_raw, const Tensor& A_log, const Tensor& dt_bias) {
  const char* op = "gdn_step";
  check_arg(ex, op, "q", q);
  check_float(op, "q", q);
  HYTRA_CHECK(q.dim() == 3 && v.dim() == 3, op, ": q must be (B,Hk,dk) and v (B,Hv,dv), got ", q.desc(), " and ",
              v.desc());
  const int64_t B = q.size(0), Hk = q.size(1), dk = q.size(2), Hv = v.size(1), dv = v.size(2);
  HYTRA_CHECK(Hk > 0 && Hv % Hk == 0, op, ": value heads Hv = ", Hv, " must be a multiple of key heads Hk = ", Hk);
  check_act(ex, op, "k", k, q, q.shape());
  check_act(ex, op, "v", v, q, {B, Hv, dv});
  check_act(ex, op, "o", o, q, v.shape());
  check_act(ex, op, "alpha", alpha, q, {B, Hv});
  check_act(ex, op, "beta_raw", beta_raw, q, {B, Hv});
  check_arg(ex, op, "state", state);
  check_stat(op, "state", state, q, {B, Hv, dv, dk});
  check_small_param(ex, op, "A_log", A_log, q, Hv);
  check_small_param(ex, op, "dt_bias", dt_bias, q, Hv);
  on(ex, op)->gdn_step(ex, o, state, q, k, v, alpha, beta_raw, A_log, dt_bias);
}

// ---- mixture-of-experts ---------------------------------------------------------------------------
namespace {
void check_logits(Exec& ex, const char* op, const Tensor& logits) {
  check_arg(ex, op, "logits", logits);
  HYTRA_CHECK(logits.dtype() == DType::F32 || logits.dtype() == DType::F64, op,
              ": logits must be fp32 (fp64 on CPU), got ", logits.desc());
  HYTRA_CHECK(logits.dim() == 2, op, ": logits must be (N,E), got ", logits.desc());
}
void check_i32(Exec& ex, const char* op, const char* n, const Tensor& t, const Shape& shape) {
  check_arg(ex, op, n, t);
  HYTRA_CHECK(t.dtype() == DType::I32, op, ": argument '", n, "' must be int32, got ", t.desc());
  check_shape(op, n, t, shape);
}
void check_act_kind(const char* op, const Tensor& h, const Tensor& y, ops::ExpertActivation act,
                    int64_t glu_interleave) {
  const bool glu = act == ExpertActivation::SwiGLU || act == ExpertActivation::QuickGeGLU;
  HYTRA_CHECK(h.dim() == 2 && y.dim() == 2 && h.size(0) == y.size(0) && h.size(1) == (glu ? 2 : 1) * y.size(1), op,
              ": h must be (R,", glu ? "2F" : "F", ") for y (R,F), got h ", h.desc(), " and y ", y.desc());
  HYTRA_CHECK(glu_interleave >= 0 && (glu_interleave == 0 || (glu && y.size(1) % glu_interleave == 0)), op,
              ": glu_interleave must be 0, or (GLU activations only) a divisor of F = ", y.size(1), ", got ",
              glu_interleave);
}
}  // namespace

void moe_router_fwd(Exec& ex, Tensor& probs, Tensor& top, const Tensor& logits, const Tensor& expert_bias, int64_t k,
                    RouterScore score, bool pre_softmax, int64_t num_groups, int64_t group_topk, double scaling) {
  const char* op = "moe_router_fwd";
  check_logits(ex, op, logits);
  const int64_t N = logits.size(0), E = logits.size(1);
  HYTRA_CHECK(k >= 1 && k <= E, op, ": k must be in [1, E = ", E, "], got ", k);
  HYTRA_CHECK(
      num_groups == 0 || (num_groups > 0 && E % num_groups == 0 && group_topk >= 1 && group_topk <= num_groups &&
                          k >= group_topk && k / group_topk <= E / num_groups && k <= group_topk * (E / num_groups)),
      op, ": group-limited routing needs E (", E, ") divisible by num_groups (", num_groups, "), 1 <= group_topk (",
      group_topk, ") <= min(num_groups, k = ", k, ") and k <= group_topk x experts per group");
  check_arg(ex, op, "probs", probs);
  check_shape(op, "probs", probs, {N, k});
  check_same_dtype(op, "probs", probs, logits);
  check_i32(ex, op, "top", top, {N, k});
  if (expert_bias.defined()) {
    HYTRA_CHECK(score == RouterScore::Sigmoid, op, ": an expert bias needs the sigmoid score function");
    check_arg(ex, op, "expert_bias", expert_bias);
    check_stat(op, "expert_bias", expert_bias, logits, {E});
  }
  on(ex, "moe_router_fwd")
      ->moe_router_fwd(ex, probs, top, logits, expert_bias, k, score, pre_softmax, num_groups, group_topk, scaling);
}

void moe_router_bwd(Exec& ex, Tensor& dlogits, const Tensor& dprobs, const Tensor& logits, const Tensor& top,
                    RouterScore score, bool pre_softmax, double scaling) {
  const char* op = "moe_router_bwd";
  check_logits(ex, op, logits);
  const int64_t N = logits.size(0);
  HYTRA_CHECK(top.dim() == 2 && top.size(0) == N, op, ": top must be (N,K), got ", top.desc());
  check_i32(ex, op, "top", top, top.shape());
  for (auto [n, t] : {Arg{"dlogits", &dlogits}, {"dprobs", &dprobs}}) {
    check_arg(ex, op, n, *t);
    check_same_dtype(op, n, *t, logits);
  }
  check_shape(op, "dlogits", dlogits, logits.shape());
  check_shape(op, "dprobs", dprobs, top.shape());
  on(ex, "moe_router_bwd")->moe_router_bwd(ex, dlogits, dprobs, logits, top, score, pre_softmax, scaling);
}

void moe_aux_loss(Exec& ex, Tensor& loss, Tensor& counts, Tensor& dlogits, const Tensor& logits,
                  const Tensor& global_counts, int64_t k, RouterScore score, int64_t num_seqs, double coeff,
                  double grad_scale) {
  const char* op = "moe_aux_loss";
  check_logits(ex, op, logits);
  const int64_t N = logits.size(0), E = logits.size(1);
  HYTRA_CHECK(k >= 1 && k <= E, op, ": k must be in [1, E = ", E, "], got ", k);
  HYTRA_CHECK(num_seqs >= 1 && N % num_seqs == 0, op, ": num_seqs must divide N = ", N, ", got ", num_seqs);
  check_arg(ex, op, "loss", loss);
  check_stat(op, "loss", loss, logits, {1});
  check_arg(ex, op, "counts", counts);
  check_stat(op, "counts", counts, logits, {num_seqs, E});
  if (global_counts.defined()) {
    HYTRA_CHECK(num_seqs == 1, op, ": global_counts needs num_seqs == 1, got ", num_seqs);
    check_arg(ex, op, "global_counts", global_counts);
    check_stat(op, "global_counts", global_counts, logits, {1, E});
  }
  if (dlogits.defined()) {
    check_arg(ex, op, "dlogits", dlogits);
    check_shape(op, "dlogits", dlogits, logits.shape());
    check_same_dtype(op, "dlogits", dlogits, logits);
  }
  on(ex, "moe_aux_loss")
      ->moe_aux_loss(ex, loss, counts, dlogits, logits, global_counts, k, score, num_seqs, coeff, grad_scale);
}

void moe_z_loss(Exec& ex, Tensor& loss, Tensor& dlogits, const Tensor& logits, double coeff, double grad_scale) {
  const char* op = "moe_z_loss";
  check_logits(ex, op, logits);
  check_arg(ex, op, "loss", loss);
  check_stat(op, "loss", loss, logits, {1});
  check_arg(ex, op, "dlogits", dlogits);
  check_shape(op, "dlogits", dlogits, logits.shape());
  check_same_dtype(op, "dlogits", dlogits, logits);
  on(ex, "moe_z_loss")->moe_z_loss(ex, loss, dlogits, logits, coeff, grad_scale);
}

void moe_plan_dropless(Exec& ex, Tensor& counts, Tensor& offsets, Tensor& row_token, Tensor& row_slot,
                       Tensor& slot_row, Tensor& token_rows, const Tensor& top, int64_t num_experts) {
  const char* op = "moe_plan_dropless";
  check_arg(ex, op, "top", top);
  HYTRA_CHECK(top.dim() == 2 && top.dtype() == DType::I32, op, ": top must be (N,K) int32, got ", top.desc());
  HYTRA_CHECK(num_experts >= 1 && top.size(1) <= num_experts, op, ": num_experts ", num_experts,
              " must be at least 1 and at least top-k ", top.size(1));
  const int64_t NK = top.numel();
  check_i32(ex, op, "counts", counts, {num_experts});
  check_i32(ex, op, "offsets", offsets, {num_experts + 1});
  for (auto [n, t] : {Arg{"row_token", &row_token}, {"row_slot", &row_slot}, {"slot_row", &slot_row},
                      {"token_rows", &token_rows}})
    check_i32(ex, op, n, *t, {NK});
  on(ex, "moe_plan_dropless")
      ->moe_plan_dropless(ex, counts, offsets, row_token, row_slot, slot_row, token_rows, top, num_experts);
}

int64_t moe_capacity_rows(int64_t N, int64_t K, int64_t E, int64_t capacity, bool pad_to_capacity,
                          int64_t pad_multiple) {
  const int64_t cap = capacity > 0 ? std::min(capacity, N) : N;
  const int64_t m = std::max<int64_t>(pad_multiple, 1);
  if (pad_to_capacity) return E * std::min((cap + m - 1) / m * m, N);
  return std::min(std::min(N * K, E * cap) + E * (m - 1), E * N);
}

void moe_plan_capacity(Exec& ex, Tensor& counts, Tensor& offsets, Tensor& row_token, Tensor& row_prob,
                       Tensor& token_offsets, Tensor& token_rows, Tensor& prob_offsets, Tensor& prob_rows,
                       const Tensor& top, const Tensor& probs, int64_t num_experts, int64_t capacity,
                       bool drop_by_position, bool pad_to_capacity, int64_t pad_multiple) {
  const char* op = "moe_plan_capacity";
  check_arg(ex, op, "top", top);
  HYTRA_CHECK(top.dim() == 2 && top.dtype() == DType::I32, op, ": top must be (N,K) int32, got ", top.desc());
  const int64_t N = top.size(0), K = top.size(1), NK = top.numel();
  HYTRA_CHECK(num_experts >= 1 && K <= num_experts, op, ": num_experts ", num_experts,
              " must be at least 1 and at least top-k ", K);
  check_arg(ex, op, "probs", probs);
  HYTRA_CHECK(probs.dtype() == DType::F32 || probs.dtype() == DType::F64, op,
              ": probs must be fp32 (fp64 on CPU), got ", probs.desc());
  check_shape(op, "probs", probs, top.shape());
  HYTRA_CHECK(pad_multiple >= 0, op, ": pad_multiple must be >= 0, got ", pad_multiple);
  HYTRA_CHECK(!pad_to_capacity || capacity > 0, op, ": pad_to_capacity needs a capacity > 0, got ", capacity);
  const int64_t R = moe_capacity_rows(N, K, num_experts, capacity, pad_to_capacity, pad_multiple);
  HYTRA_CHECK(R < (int64_t(1) << 31) && NK < (int64_t(1) << 31), op, ": ", R, " rows and ", NK,
              " choices do not fit int32 indices");
  check_i32(ex, op, "counts", counts, {num_experts});
  check_i32(ex, op, "offsets", offsets, {num_experts + 1});
  for (auto [n, t] : {Arg{"row_token", &row_token}, {"row_prob", &row_prob}, {"token_rows", &token_rows}})
    check_i32(ex, op, n, *t, {R});
  check_i32(ex, op, "token_offsets", token_offsets, {N + 1});
  check_i32(ex, op, "prob_offsets", prob_offsets, {NK + 1});
  check_i32(ex, op, "prob_rows", prob_rows, {NK});
  on(ex, "moe_plan_capacity")
      ->moe_plan_capacity(ex, counts, offsets, row_token, row_prob, token_offsets, token_rows, prob_offsets, prob_rows,
                          top, probs, num_experts, capacity, drop_by_position, pad_to_capacity, pad_multiple);
}

void gather_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& idx) {
  const char* op = "gather_rows";
  check_arg(ex, op, "x", x);
  HYTRA_CHECK(x.dim() == 2, op, ": x must be (N,C), got ", x.desc());
  HYTRA_CHECK(idx.dim() == 1, op, ": idx must be (R), got ", idx.desc());
  check_i32(ex, op, "idx", idx, idx.shape());
  check_act(ex, op, "y", y, x, {idx.size(0), x.size(1)});
  on(ex, "gather_rows")->gather_rows(ex, y, x, idx);
}

void scatter_add_rows(Exec& ex, Tensor& y, const Tensor& x, const Tensor& offsets, const Tensor& rows) {
  const char* op = "scatter_add_rows";
  check_arg(ex, op, "x", x);
  check_float(op, "x", x);
  HYTRA_CHECK(x.dim() == 2 && y.dim() == 2, op, ": x and y must be (R,C) and (N,C), got ", x.desc(), " and ", y.desc());
  check_act(ex, op, "y", y, x, {y.size(0), x.size(1)});
  check_i32(ex, op, "offsets", offsets, {y.size(0) + 1});
  HYTRA_CHECK(rows.dim() == 1, op, ": rows must be (M), got ", rows.desc());
  check_i32(ex, op, "rows", rows, rows.shape());
  on(ex, "scatter_add_rows")->scatter_add_rows(ex, y, x, offsets, rows);
}

void moe_act_fwd(Exec& ex, Tensor& y, const Tensor& h, const Tensor& probs, ExpertActivation act,
                 int64_t glu_interleave, double linear_offset, double clamp) {
  const char* op = "moe_act_fwd";
  check_arg(ex, op, "h", h);
  check_float(op, "h", h);
  check_arg(ex, op, "y", y);
  check_same_dtype(op, "y", y, h);
  check_act_kind(op, h, y, act, glu_interleave);
  check_arg(ex, op, "probs", probs);
  check_stat(op, "probs", probs, h, {h.size(0)});
  on(ex, "moe_act_fwd")->moe_act_fwd(ex, y, h, probs, act, glu_interleave, linear_offset, clamp);
}

void moe_act_bwd(Exec& ex, Tensor& dh, Tensor& dprobs, const Tensor& dy, const Tensor& h, const Tensor& probs,
                 ExpertActivation act, int64_t glu_interleave, double linear_offset, double clamp) {
  const char* op = "moe_act_bwd";
  check_arg(ex, op, "h", h);
  check_float(op, "h", h);
  check_arg(ex, op, "dy", dy);
  check_same_dtype(op, "dy", dy, h);
  check_act_kind(op, h, dy, act, glu_interleave);
  check_act(ex, op, "dh", dh, h, h.shape());
  check_arg(ex, op, "probs", probs);
  check_stat(op, "probs", probs, h, {h.size(0)});
  check_arg(ex, op, "dprobs", dprobs);
  check_stat(op, "dprobs", dprobs, h, {h.size(0)});
  on(ex, "moe_act_bwd")->moe_act_bwd(ex, dh, dprobs, dy, h, probs, act, glu_interleave, linear_offset, clamp);
}

// ---- grouped GEMM ---------------------------------------------------------------------------------
namespace {
// a (R,K) floating, offsets (E+1) int32 with E = w.size(0), w 3-D of a's dtype.
void check_grouped(Exec& ex, const char* op, const Tensor& a, const char* a_name, const Tensor& w,
                   const Tensor& offsets) {
  check_arg(ex, op, a_name, a);
  check_float(op, a_name, a);
  HYTRA_CHECK(a.dim() == 2, op, ": ", a_name, " must be (R,K), got ", a.desc());
  check_arg(ex, op, "w", w);
  HYTRA_CHECK(w.dim() == 3 && w.size(0) >= 1, op, ": w must be (E,rows,cols) with E >= 1, got ", w.desc());
  check_same_dtype(op, "w", w, a);
  check_i32(ex, op, "offsets", offsets, {w.size(0) + 1});
}
}  // namespace

void grouped_gemm(Exec& ex, Tensor& y, const Tensor& a, const Tensor& w, const Tensor& offsets, bool trans_w) {
  const char* op = "grouped_gemm";
  check_grouped(ex, op, a, "a", w, offsets);
  const int64_t K = a.size(1), N = trans_w ? w.size(1) : w.size(2);
  HYTRA_CHECK((trans_w ? w.size(2) : w.size(1)) == K, op, ": w ", w.desc(), " does not contract with a ", a.desc(),
              trans_w ? " (expected (E,N,K))" : " (expected (E,K,N))");
  check_act(ex, op, "y", y, a, {a.size(0), N});
  on(ex, "grouped_gemm")->grouped_gemm(ex, y, a, w, offsets, trans_w);
}

void grouped_gemm_wgrad(Exec& ex, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets, float beta) {
  const char* op = "grouped_gemm_wgrad";
  check_arg(ex, op, "dw", dw);
  HYTRA_CHECK(dw.dim() == 3, op, ": dw must be (E,N,K), got ", dw.desc());
  check_stat(op, "dw", dw, x, dw.shape());
  check_arg(ex, op, "x", x);
  check_float(op, "x", x);
  HYTRA_CHECK(x.dim() == 2 && x.size(1) == dw.size(2), op, ": x must be (R,", dw.size(2), "), got ", x.desc());
  check_act(ex, op, "dy", dy, x, {x.size(0), dw.size(1)});
  check_i32(ex, op, "offsets", offsets, {dw.size(0) + 1});
  HYTRA_CHECK(beta == 0.0f || beta == 1.0f, op, ": beta must be 0 or 1, got ", beta);
  on(ex, "grouped_gemm_wgrad")->grouped_gemm_wgrad(ex, dw, dy, x, offsets, beta);
}

void grouped_gemm_glu(Exec& ex, Tensor& h, Tensor& y, const Tensor& a, const Tensor& w, const Tensor& offsets,
                      const Tensor& probs, ExpertActivation act, int64_t glu_interleave, double linear_offset,
                      double clamp) {
  const char* op = "grouped_gemm_glu";
  check_grouped(ex, op, a, "a", w, offsets);
  HYTRA_CHECK(act == ExpertActivation::SwiGLU || act == ExpertActivation::QuickGeGLU, op,
              ": the activation must be a GLU kind (SwiGLU or QuickGeGLU)");
  HYTRA_CHECK(w.size(2) == a.size(1) && w.size(1) % 2 == 0, op, ": w must be (E,2F,K) for a ", a.desc(), ", got ",
              w.desc());
  check_act(ex, op, "h", h, a, {a.size(0), w.size(1)});
  check_act(ex, op, "y", y, a, {a.size(0), w.size(1) / 2});
  check_act_kind(op, h, y, act, glu_interleave);
  check_arg(ex, op, "probs", probs);
  check_stat(op, "probs", probs, h, {h.size(0)});
  on(ex, "grouped_gemm_glu")
      ->grouped_gemm_glu(ex, h, y, a, w, offsets, probs, act, glu_interleave, linear_offset, clamp);
}

// ---- mHC ------------------------------------------------------------------------------------------
namespace {
void check_fp32(Exec& ex, const char* op, const char* n, const Tensor& t, const Shape& shape) {
  check_arg(ex, op, n, t);
  HYTRA_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, op, ": argument '", n,
              "' must be fp32 (fp64 on CPU), got ", t.desc());
  check_shape(op, n, t, shape);
}
void check_square(const char* op, const Tensor& t) {
  HYTRA_CHECK(t.dim() == 3 && t.size(1) == t.size(2) && t.size(1) >= 1, op, ": expected (R,n,n), got ", t.desc());
}
// X (N,n,C) and the coefficient shapes.
void check_streams(Exec& ex, const char* op, const Tensor& X) {
  check_arg(ex, op, "X", X);
  check_float(op, "X", X);
  HYTRA_CHECK(X.dim() == 3, op, ": X must be (N,n,C), got ", X.desc());
}
}  // namespace

void sinkhorn_fwd(Exec& ex, Tensor& M, const Tensor& logits, int64_t iterations, MhcVariant variant) {
  const char* op = "sinkhorn_fwd";
  check_square(op, logits);
  HYTRA_CHECK(iterations >= 1, op, ": iterations must be >= 1, got ", iterations);
  check_fp32(ex, op, "logits", logits, logits.shape());
  check_fp32(ex, op, "M", M, logits.shape());
  check_same_dtype(op, "M", M, logits);
  on(ex, "sinkhorn_fwd")->sinkhorn_fwd(ex, M, logits, iterations, variant);
}

void sinkhorn_bwd(Exec& ex, Tensor& dlogits, const Tensor& dM, const Tensor& logits, int64_t iterations,
                  MhcVariant variant) {
  const char* op = "sinkhorn_bwd";
  check_square(op, logits);
  HYTRA_CHECK(iterations >= 1, op, ": iterations must be >= 1, got ", iterations);
  for (auto [n, t] : {Arg{"logits", &logits}, {"dM", &dM}, {"dlogits", &dlogits}}) {
    check_fp32(ex, op, n, *t, logits.shape());
    check_same_dtype(op, n, *t, logits);
  }
  on(ex, "sinkhorn_bwd")->sinkhorn_bwd(ex, dlogits, dM, logits, iterations, variant);
}

namespace {
// proj (N, n^2+2n), the alphas, bias: n from h_res (N,n,n).
void check_coeffs(Exec& ex, const char* op, const Tensor& proj, const Tensor& alpha_pre, const Tensor& alpha_post,
                  const Tensor& alpha_res, const Tensor& bias, int64_t n, int64_t iterations) {
  check_arg(ex, op, "proj", proj);
  HYTRA_CHECK(proj.dim() == 2 && n >= 1, op, ": proj must be (N, n^2+2n) with n = ", n, ", got ", proj.desc());
  HYTRA_CHECK(iterations >= 1, op, ": iterations must be >= 1, got ", iterations);
  const int64_t N = proj.size(0), P = n * n + 2 * n;
  check_fp32(ex, op, "proj", proj, {N, P});
  for (auto [nm, t] : {Arg{"alpha_pre", &alpha_pre}, {"alpha_post", &alpha_post}, {"alpha_res", &alpha_res}}) {
    check_fp32(ex, op, nm, *t, {1});
    check_same_dtype(op, nm, *t, proj);
  }
  check_fp32(ex, op, "bias", bias, {P});
  check_same_dtype(op, "bias", bias, proj);
}
}  // namespace

void mhc_coeffs_fwd(Exec& ex, Tensor& h_pre, Tensor& h_post, Tensor& h_res, Tensor& r, const Tensor& rms,
                    const Tensor& proj, const Tensor& alpha_pre, const Tensor& alpha_post, const Tensor& alpha_res,
                    const Tensor& bias, int64_t iterations, MhcVariant variant) {
  const char* op = "mhc_coeffs_fwd";
  check_square(op, h_res);
  const int64_t n = h_res.size(1);
  check_coeffs(ex, op, proj, alpha_pre, alpha_post, alpha_res, bias, n, iterations);
  const int64_t N = proj.size(0);
  check_fp32(ex, op, "h_pre", h_pre, {N, n});
  check_fp32(ex, op, "h_post", h_post, {N, n});
  check_fp32(ex, op, "h_res", h_res, {N, n, n});
  check_fp32(ex, op, "r", r, {N});
  check_fp32(ex, op, "rms", rms, {N});
  for (auto [nm, t] : {Arg{"h_pre", &h_pre}, {"h_post", &h_post}, {"h_res", &h_res}, {"r", &r}, {"rms", &rms}})
    check_same_dtype(op, nm, *t, proj);
  on(ex, "mhc_coeffs_fwd")
      ->mhc_coeffs_fwd(ex, h_pre, h_post, h_res, r, rms, proj, alpha_pre, alpha_post, alpha_res, bias, iterations,
                       variant);
}

void mhc_coeffs_bwd(Exec& ex, Tensor& dproj, Tensor& dr, Tensor& dalpha_pre, Tensor& dalpha_post, Tensor& dalpha_res,
                    Tensor& dbias, const Tensor& dh_pre, const Tensor& dh_post, const Tensor& dh_res,
                    const Tensor& proj, const Tensor& alpha_pre, const Tensor& alpha_post, const Tensor& alpha_res,
                    const Tensor& bias, const Tensor& r, int64_t iterations, MhcVariant variant) {
  const char* op = "mhc_coeffs_bwd";
  check_square(op, dh_res);
  const int64_t n = dh_res.size(1);
  check_coeffs(ex, op, proj, alpha_pre, alpha_post, alpha_res, bias, n, iterations);
  const int64_t N = proj.size(0), P = n * n + 2 * n;
  for (auto [nm, t, shape] : {std::tuple<const char*, const Tensor*, Shape>{"dproj", &dproj, {N, P}},
                              {"dr", &dr, {N}},
                              {"dalpha_pre", &dalpha_pre, {1}},
                              {"dalpha_post", &dalpha_post, {1}},
                              {"dalpha_res", &dalpha_res, {1}},
                              {"dbias", &dbias, {P}},
                              {"dh_pre", &dh_pre, {N, n}},
                              {"dh_post", &dh_post, {N, n}},
                              {"dh_res", &dh_res, {N, n, n}},
                              {"r", &r, {N}}}) {
    check_fp32(ex, op, nm, *t, shape);
    check_same_dtype(op, nm, *t, proj);
  }
  on(ex, "mhc_coeffs_bwd")
      ->mhc_coeffs_bwd(ex, dproj, dr, dalpha_pre, dalpha_post, dalpha_res, dbias, dh_pre, dh_post, dh_res, proj,
                       alpha_pre, alpha_post, alpha_res, bias, r, iterations, variant);
}

void mhc_proj_fwd(Exec& ex, Tensor& proj, Tensor& rms, const Tensor& x, const Tensor& w) {
  const char* op = "mhc_proj_fwd";
  check_arg(ex, op, "x", x);
  check_float(op, "x", x);
  HYTRA_CHECK(x.dim() == 2, op, ": x must be (N,D), got ", x.desc());
  check_fp32(ex, op, "w", w, {w.size(0), x.size(1)});
  check_fp32(ex, op, "proj", proj, {x.size(0), w.size(0)});
  check_fp32(ex, op, "rms", rms, {x.size(0)});
  check_same_dtype(op, "proj", proj, w);
  check_same_dtype(op, "rms", rms, w);
  on(ex, "mhc_proj_fwd")->mhc_proj_fwd(ex, proj, rms, x, w);
}

void mhc_streams_bwd(Exec& ex, Tensor& dX, Tensor& dw, const Tensor& dproj, const Tensor& dr, const Tensor& r,
                     const Tensor& rms, const Tensor& du, const Tensor& h_pre, const Tensor& X, const Tensor& w) {
  const char* op = "mhc_streams_bwd";
  check_streams(ex, op, X);
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2), D = n * C;
  check_act(ex, op, "dX", dX, X, X.shape());
  check_act(ex, op, "du", du, X, {N, C});
  check_fp32(ex, op, "w", w, {w.size(0), D});
  const int64_t P = w.size(0);
  for (auto [nm, t, shape] : {std::tuple<const char*, const Tensor*, Shape>{"dw", &dw, {P, D}},
                              {"dproj", &dproj, {N, P}},
                              {"dr", &dr, {N}},
                              {"r", &r, {N}},
                              {"rms", &rms, {N}},
                              {"h_pre", &h_pre, {N, n}}}) {
    check_fp32(ex, op, nm, *t, shape);
    check_same_dtype(op, nm, *t, w);
  }
  on(ex, "mhc_streams_bwd")->mhc_streams_bwd(ex, dX, dw, dproj, dr, r, rms, du, h_pre, X, w);
}

void mhc_aggregate_fwd(Exec& ex, Tensor& u, const Tensor& X, const Tensor& h_pre) {
  const char* op = "mhc_aggregate_fwd";
  check_streams(ex, op, X);
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  check_act(ex, op, "u", u, X, {N, C});
  check_fp32(ex, op, "h_pre", h_pre, {N, n});
  on(ex, "mhc_aggregate_fwd")->mhc_aggregate_fwd(ex, u, X, h_pre);
}

void mhc_aggregate_bwd(Exec& ex, Tensor& dX, Tensor& dh_pre, const Tensor& du, const Tensor& X, const Tensor& h_pre) {
  const char* op = "mhc_aggregate_bwd";
  check_streams(ex, op, X);
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  if (dX.defined()) check_act(ex, op, "dX", dX, X, X.shape());
  check_act(ex, op, "du", du, X, {N, C});
  check_fp32(ex, op, "h_pre", h_pre, {N, n});
  check_fp32(ex, op, "dh_pre", dh_pre, {N, n});
  on(ex, "mhc_aggregate_bwd")->mhc_aggregate_bwd(ex, dX, dh_pre, du, X, h_pre);
}

void mhc_combine_fwd(Exec& ex, Tensor& Y, const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  const char* op = "mhc_combine_fwd";
  check_streams(ex, op, X);
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  check_act(ex, op, "Y", Y, X, X.shape());
  check_act(ex, op, "F", F, X, {N, C});
  check_fp32(ex, op, "h_res", h_res, {N, n, n});
  check_fp32(ex, op, "h_post", h_post, {N, n});
  on(ex, "mhc_combine_fwd")->mhc_combine_fwd(ex, Y, X, F, h_res, h_post);
}

void mhc_combine_bwd(Exec& ex, Tensor& dX, Tensor& dF, Tensor& dh_res, Tensor& dh_post, const Tensor& dY,
                     const Tensor& X, const Tensor& F, const Tensor& h_res, const Tensor& h_post) {
  const char* op = "mhc_combine_bwd";
  check_streams(ex, op, X);
  const int64_t N = X.size(0), n = X.size(1), C = X.size(2);
  check_act(ex, op, "dX", dX, X, X.shape());
  check_act(ex, op, "dY", dY, X, X.shape());
  check_act(ex, op, "F", F, X, {N, C});
  check_act(ex, op, "dF", dF, X, {N, C});
  check_fp32(ex, op, "h_res", h_res, {N, n, n});
  check_fp32(ex, op, "h_post", h_post, {N, n});
  check_fp32(ex, op, "dh_res", dh_res, {N, n, n});
  check_fp32(ex, op, "dh_post", dh_post, {N, n});
  on(ex, "mhc_combine_bwd")->mhc_combine_bwd(ex, dX, dF, dh_res, dh_post, dY, X, F, h_res, h_post);
}

namespace {
void check_glu(Exec& ex, const char* op, const Tensor& half, const char* half_name, const Tensor& full,
               const char* full_name) {
  check_arg(ex, op, half_name, half);
  check_arg(ex, op, full_name, full);
  check_float(op, full_name, full);
  HYTRA_CHECK(full.dim() == 2 && full.size(1) % 2 == 0, op, ": ", full_name, " must be (N,2F), got ", full.desc());
  check_shape(op, half_name, half, {full.size(0), full.size(1) / 2});
}
void check_pointwise(Exec& ex, const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  check_arg(ex, op, an, a);
  check_arg(ex, op, bn, b);
  check_float(op, an, a);
  check_float(op, bn, b);
  check_shape(op, an, a, b.shape());
}
}  // namespace

void swiglu_fwd(Exec& ex, Tensor& y, const Tensor& x) {
  check_glu(ex, "swiglu_fwd", y, "y", x, "x");
  on(ex, "swiglu_fwd")->swiglu_fwd(ex, y, x);
}
void swiglu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_glu(ex, "swiglu_bwd", dy, "dy", x, "x");
  check_pointwise(ex, "swiglu_bwd", dx, "dx", x, "x");
  on(ex, "swiglu_bwd")->swiglu_bwd(ex, dx, dy, x);
}
void gelu_fwd(Exec& ex, Tensor& y, const Tensor& x) {
  check_pointwise(ex, "gelu_fwd", y, "y", x, "x");
  on(ex, "gelu_fwd")->gelu_fwd(ex, y, x);
}
void gelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_pointwise(ex, "gelu_bwd", dx, "dx", x, "x");
  check_pointwise(ex, "gelu_bwd", dy, "dy", x, "x");
  on(ex, "gelu_bwd")->gelu_bwd(ex, dx, dy, x);
}
void sqrelu_fwd(Exec& ex, Tensor& y, const Tensor& x) {
  check_pointwise(ex, "sqrelu_fwd", y, "y", x, "x");
  on(ex, "sqrelu_fwd")->sqrelu_fwd(ex, y, x);
}
void sqrelu_bwd(Exec& ex, Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_pointwise(ex, "sqrelu_bwd", dx, "dx", x, "x");
  check_pointwise(ex, "sqrelu_bwd", dy, "dy", x, "x");
  on(ex, "sqrelu_bwd")->sqrelu_bwd(ex, dx, dy, x);
}

namespace {
// x (N,C), w (V,C), labels (N); `chunk` (vocab_chunk or token_chunk) positive; lse (N) when given.
void check_lm_head(Exec& ex, const char* op, const Tensor& x, const Tensor& w, const Tensor& labels, const Tensor* lse,
                   const char* chunk_name, int64_t chunk) {
  for (auto [n, t] : {Arg{"x", &x}, {"w", &w}, {"labels", &labels}}) check_arg(ex, op, n, *t);
  check_float(op, "x", x);
  HYTRA_CHECK(x.dim() == 2 && w.dim() == 2 && w.size(1) == x.size(1), op, ": x must be (N,C) and w (V,C), got ",
              x.desc(), ", ", w.desc());
  check_same_dtype(op, "w", w, x);
  check_ids(op, "labels", labels, x.size(0));
  if (lse) {
    check_arg(ex, op, "lse", *lse);
    check_stat(op, "lse", *lse, x, {x.size(0)});
  }
  HYTRA_CHECK(chunk > 0, op, ": ", chunk_name, " must be positive, got ", chunk);
}
}  // namespace

void lm_head_ce_fwd(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& x, const Tensor& w, const Tensor& labels,
                    int64_t vocab_chunk) {
  check_lm_head(ex, "lm_head_ce_fwd", x, w, labels, &lse, "vocab_chunk", vocab_chunk);
  check_arg(ex, "lm_head_ce_fwd", "loss", loss);
  check_stat("lm_head_ce_fwd", "loss", loss, x, {x.size(0)});
  on(ex, "lm_head_ce_fwd")->lm_head_ce_fwd(ex, loss, lse, x, w, labels, vocab_chunk);
}

void lm_head_ce_bwd(Exec& ex, Tensor& dx, Tensor& dw, const Tensor& dloss, const Tensor& x, const Tensor& w,
                    const Tensor& labels, const Tensor& lse, int64_t vocab_chunk) {
  const char* op = "lm_head_ce_bwd";
  check_lm_head(ex, op, x, w, labels, &lse, "vocab_chunk", vocab_chunk);
  for (auto [n, t] : {Arg{"dx", &dx}, {"dw", &dw}, {"dloss", &dloss}}) check_arg(ex, op, n, *t);
  check_shape(op, "dx", dx, x.shape());
  check_shape(op, "dw", dw, w.shape());
  check_stat(op, "dloss", dloss, x, {x.size(0)});
  on(ex, "lm_head_ce_bwd")->lm_head_ce_bwd(ex, dx, dw, dloss, x, w, labels, lse, vocab_chunk);
}

void lm_head_ce_fwd_bwd(Exec& ex, Tensor& loss, Tensor& dx, Tensor& dw, const Tensor& x, const Tensor& w,
                        const Tensor& labels, const Tensor& dloss, int64_t token_chunk) {
  const char* op = "lm_head_ce_fwd_bwd";
  check_lm_head(ex, op, x, w, labels, nullptr, "token_chunk", token_chunk);
  for (auto [n, t] : {Arg{"loss", &loss}, {"dx", &dx}, {"dw", &dw}, {"dloss", &dloss}}) check_arg(ex, op, n, *t);
  check_stat(op, "loss", loss, x, {x.size(0)});
  check_stat(op, "dloss", dloss, x, {x.size(0)});
  check_shape(op, "dx", dx, x.shape());
  check_shape(op, "dw", dw, w.shape());
  on(ex, "lm_head_ce_fwd_bwd")->lm_head_ce_fwd_bwd(ex, loss, dx, dw, x, w, labels, dloss, token_chunk);
}

void mtp_shift(Exec& ex, Tensor& ids_next, Tensor& labels_next, Tensor& dloss, Tensor& targets, const Tensor& ids,
               const Tensor& labels, double scale, double grad_scale) {
  const char* op = "mtp_shift";
  for (auto [n, t] : {Arg{"ids_next", &ids_next},
                      {"labels_next", &labels_next},
                      {"dloss", &dloss},
                      {"targets", &targets},
                      {"ids", &ids},
                      {"labels", &labels}})
    check_arg(ex, op, n, *t);
  HYTRA_CHECK(ids.dim() == 2, op, ": argument 'ids' must be (B,T), got ", ids.desc());
  for (auto [n, t] : {Arg{"ids_next", &ids_next}, {"labels_next", &labels_next}, {"ids", &ids}, {"labels", &labels}}) {
    HYTRA_CHECK(t->dtype() == DType::I32, op, ": argument '", n, "' must be int32, got ", t->desc());
    check_shape(op, n, *t, ids.shape());
  }
  check_float(op, "dloss", dloss);
  check_stat(op, "dloss", dloss, dloss, ids.shape());
  check_stat(op, "targets", targets, dloss, {1});
  HYTRA_CHECK(ids_next.raw() != ids.raw() && labels_next.raw() != labels.raw(), op,
              ": the rolled outputs must not alias their inputs");
  on(ex, "mtp_shift")->mtp_shift(ex, ids_next, labels_next, dloss, targets, ids, labels, scale, grad_scale);
}

void vocab_shard_ids(Exec& ex, Tensor& out, const Tensor& ids, int64_t start, int64_t count, int64_t outside) {
  const char* op = "vocab_shard_ids";
  check_arg(ex, op, "out", out);
  check_arg(ex, op, "ids", ids);
  check_ids(op, "ids", ids, ids.numel());
  check_ids(op, "out", out, ids.numel());
  HYTRA_CHECK(start >= 0 && count > 0, op, ": the shard [", start, ", +", count, ") is empty or negative");
  on(ex, "vocab_shard_ids")->vocab_shard_ids(ex, out, ids, start, count, outside);
}

void ce_shard_target(Exec& ex, Tensor& target, const Tensor& loss, const Tensor& lse, const Tensor& shard_labels) {
  const char* op = "ce_shard_target";
  for (auto [n, t] : {Arg{"target", &target}, {"loss", &loss}, {"lse", &lse}, {"shard_labels", &shard_labels}})
    check_arg(ex, op, n, *t);
  const int64_t N = loss.numel();
  check_ids(op, "shard_labels", shard_labels, N);
  check_float(op, "loss", loss);
  check_stat(op, "loss", loss, loss, {N});
  check_stat(op, "lse", lse, loss, {N});
  check_stat(op, "target", target, loss, {N});
  on(ex, "ce_shard_target")->ce_shard_target(ex, target, loss, lse, shard_labels);
}

void ce_shard_combine(Exec& ex, Tensor& loss, Tensor& lse, const Tensor& lse_parts, const Tensor& target,
                      const Tensor& labels) {
  const char* op = "ce_shard_combine";
  for (auto [n, t] :
       {Arg{"loss", &loss}, {"lse", &lse}, {"lse_parts", &lse_parts}, {"target", &target}, {"labels", &labels}})
    check_arg(ex, op, n, *t);
  const int64_t N = labels.numel();
  check_ids(op, "labels", labels, N);
  check_float(op, "target", target);
  HYTRA_CHECK(lse_parts.dim() == 2 && lse_parts.size(1) == N && lse_parts.size(0) >= 1, op,
              ": argument 'lse_parts' must be (S,", N, "), got ", lse_parts.desc());
  check_stat(op, "lse_parts", lse_parts, target, lse_parts.shape());
  check_stat(op, "target", target, target, {N});
  check_stat(op, "loss", loss, target, {N});
  check_stat(op, "lse", lse, target, {N});
  on(ex, "ce_shard_combine")->ce_shard_combine(ex, loss, lse, lse_parts, target, labels);
}

void random_normal(Exec& ex, Tensor& y, uint64_t seed, uint64_t stream, double mean, double std) {
  check_arg(ex, "random_normal", "y", y);
  check_float("random_normal", "y", y);
  on(ex, "random_normal")->random_normal(ex, y, seed, stream, mean, std);
}

void adamw(Exec& ex, Tensor& p, Tensor& m, Tensor& v, const Tensor& g, Tensor& p_copy, double lr, double beta1,
           double beta2, double eps, double weight_decay, double grad_scale, int64_t step) {
  const char* op = "adamw";
  for (auto [n, t] : {Arg{"p", &p}, {"m", &m}, {"v", &v}, {"g", &g}}) {
    check_arg(ex, op, n, *t);
    HYTRA_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::F64, op, ": argument '", n,
                "' must be fp32 (fp64 on CPU), got ", t->desc());
    check_shape(op, n, *t, p.shape());
    check_same_dtype(op, n, *t, p);
  }
  if (p_copy.defined()) {
    check_arg(ex, op, "p_copy", p_copy);
    check_same_numel(op, "p_copy", p_copy, p);
  }
  HYTRA_CHECK(step >= 1, op, ": step must be >= 1, got ", step);
  on(ex, "adamw")->adamw(ex, p, m, v, g, p_copy, lr, beta1, beta2, eps, weight_decay, grad_scale, step);
}

}  // namespace hytra::ops
