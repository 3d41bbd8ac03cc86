// test_parity: every op on CUDA against the CPU reference (docs/ARCHITECTURE.md "Tests").
//   test_parity [-o <op>] [--seed <n>]
// First a coverage check: every HYTRA_OP_LIST entry must have a case (and every case must name a
// listed op), else it fails naming the op, with or without a GPU. Without a GPU it then prints
// "parity: skipped (no CUDA device)" and exits 77 (CTest's skip code). Otherwise every case runs on
// fresh random inputs, twice (the CUDA outputs of the two runs must be bitwise equal), and prints
// one line per compared output: op, shape, dtype, output, max abs, max rel, nmse, worst index,
// PASS/FAIL. Exits 1 on any failure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <string>

#include "common/compare.h"
#include "core/device.h"
#include "ops/op_list.h"
#include "parity/harness.h"

namespace hytra::parity {
namespace {

struct Verdict {
  test::CompareResult r;
  bool pass = false;
};

double rms(const Tensor& t) {
  double s = 0;
  std::vector<double> v = t.to_f64_vector();
  for (double x : v) s += std::isfinite(x) ? x * x : 0.0;
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

Verdict judge(const Case& c, const Output& o) {
  Verdict v;
  const double tol = o.tol > 0 ? o.tol : c.tol;
  if (o.got.shape() != o.want.shape()) return v;
  switch (c.criterion) {
    case Criterion::Exact:
      v.r = test::compare(o.got, o.want, test::Tolerance{0.0, 0.0});
      v.pass = !v.r.non_finite && v.r.max_abs == 0.0;
      break;
    case Criterion::Elementwise:
      v.r = test::compare(o.got, o.want, test::Tolerance{tol, 0.1 * tol * rms(o.want)});
      v.pass = !v.r.non_finite && v.r.num_bad == 0;
      break;
    case Criterion::Norm:
      v.r = test::compare(o.got, o.want, test::tol_for(c.dtype));
      v.pass = !v.r.non_finite && std::sqrt(v.r.nmse) <= tol;
      break;
  }
  return v;
}

// Run-to-run determinism: the same inputs give the same bytes.
bool bytes_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ha = a.to(Device::CPU), hb = b.to(Device::CPU);
  return std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

const char* criterion_name(Criterion c) {
  switch (c) {
    case Criterion::Exact: return "exact";
    case Criterion::Elementwise: return "rtol";
    case Criterion::Norm: return "relnorm";
  }
  return "?";
}

// Every listed op has a case and every case names a listed op.
bool coverage_ok() {
  std::set<std::string> listed, covered;
  for (const auto& info : ops::kOpList) listed.insert(info.name);
  bool ok = true;
  for (const Case& c : all_cases()) {
    covered.insert(c.op);
    if (!listed.count(c.op)) {
      std::printf("parity: FAIL: case for '%s', which is not in HYTRA_OP_LIST\n", c.op.c_str());
      ok = false;
    }
  }
  for (const auto& info : ops::kOpList) {
    if (!covered.count(info.name)) {
      std::printf("parity: FAIL: op '%s' (family %s) has no parity case (add one in tests/parity/cases/%s.cpp)\n",
                  info.name, info.family, info.family);
      ok = false;
    }
  }
  return ok;
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [-o <op>] [--seed <n>]\n", argv0);
  return 2;
}

}  // namespace
}  // namespace hytra::parity

int main(int argc, char** argv) {
  using namespace hytra::parity;
  std::string only;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-o") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10);
    else
      return usage(argv[0]);
  }
  if (!coverage_ok()) return 1;
  if (!only.empty()) {
    bool known = false;
    for (const auto& info : hytra::ops::kOpList) known = known || only == info.name;
    if (!known) {
      std::printf("parity: unknown op '%s'\n", only.c_str());
      return 2;
    }
  }
  if (!hytra::cuda_available()) {
    std::printf("parity: skipped (no CUDA device)\n");
    return 77;
  }
  int run = 0, failed = 0;
  const auto& cases = all_cases();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    if (!only.empty() && c.op != only) continue;
    ++run;
    const uint64_t case_seed = seed * 1000003ull + ci * 101ull;
    const char* dt = hytra::dtype_name(c.dtype);
    try {
      std::vector<Output> outs = c.run(case_seed);
      std::vector<Output> again = c.run(case_seed);
      for (size_t oi = 0; oi < outs.size(); ++oi) {
        const Output& o = outs[oi];
        Verdict v = judge(c, o);
        const bool deterministic = bytes_equal(o.got, again[oi].got);
        v.pass = v.pass && deterministic;
        if (!v.pass) ++failed;
        std::printf("%-15s %-28s %-5s %-6s max_abs=%-10.3g max_rel=%-10.3g nmse=%-10.3g worst=%-8lld %s=%-7.0e %s\n",
                    c.op.c_str(), c.shape.c_str(), dt, o.name.c_str(), v.r.max_abs, v.r.max_rel, v.r.nmse,
                    static_cast<long long>(v.r.worst), criterion_name(c.criterion), o.tol > 0 ? o.tol : c.tol,
                    v.pass ? "PASS" : "FAIL");
        if (o.got.shape() != o.want.shape())
          std::printf("    shape mismatch: got %s, want %s\n", o.got.desc().c_str(), o.want.desc().c_str());
        else if (!deterministic)
          std::printf("    not deterministic: a second run on the same inputs differs bitwise\n");
        else if (v.r.non_finite)
          std::printf("    NaN/Inf at index %lld\n", static_cast<long long>(v.r.worst));
      }
    } catch (const std::exception& e) {
      ++failed;
      std::printf("%-15s %-28s %-5s FAIL (error: %s)\n", c.op.c_str(), c.shape.c_str(), dt, e.what());
    }
  }
  std::printf("parity: %d cases, %d failed outputs (seed %llu)\n", run, failed, static_cast<unsigned long long>(seed));
  return failed == 0 ? 0 : 1;
}
