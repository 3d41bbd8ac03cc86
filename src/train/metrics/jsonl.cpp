// JSON-lines metrics writer (jsonl.h).
#include "train/metrics/jsonl.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/json.h"

namespace hytra {
namespace {


std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class Object {
 public:
  Object& put(const std::string& key, const std::string& raw) {
    text_ += (text_.size() > 1 ? ", " : "") + json_quote(key) + ": " + raw;
    return *this;
  }
  Object& num(const std::string& key, double v) { return put(key, number(v)); }
  Object& num(const std::string& key, int64_t v) { return put(key, std::to_string(v)); }
  std::string done() const { return text_ + "}"; }

 private:
  std::string text_ = "{";
};

}  // namespace

std::string iteration_json(const IterationLog& g) {
  Object o;
  o.put("time", json_quote(format_timestamp(g.time)));
  o.num("iteration", g.iteration)
      .num("train_iters", g.train_iters)
      .num("consumed_samples", g.consumed_samples);
  o.num("skipped_samples", g.skipped_samples).num("ms_per_iter", g.ms_per_iter);
  if (g.tflops_per_gpu) o.num("tflops_per_gpu", *g.tflops_per_gpu);
  if (g.tokens_per_s) o.num("tokens_per_s", *g.tokens_per_s);
  if (g.lr) o.num("lr", *g.lr);
  o.num("global_batch_size", g.global_batch_size);
  for (const auto& [name, value] : g.losses) o.num(name, value);
  for (const auto& [name, value] : g.moe_metrics) o.num(name, value);
  o.num("loss_scale", g.loss_scale);
  if (g.grad_norm) o.num("grad_norm", *g.grad_norm);
  if (g.num_zeros) o.num("num_zeros", *g.num_zeros);
  if (g.params_norm) o.num("params_norm", *g.params_norm);
  o.num("skipped_iterations", g.skipped_iterations).num("nan_iterations", g.nan_iterations);
  if (!g.moe_layers.empty()) {
    std::string layers = "[";
    for (const MoeLayerLog& m : g.moe_layers) {
      Object l;
      l.num("layer", m.layer).num("load_balancing_loss", m.load_balancing_loss).num("z_loss", m.z_loss);
      std::string tokens = "[";
      for (size_t e = 0; e < m.tokens_per_expert.size(); ++e)
        tokens += (e ? ", " : "") + std::to_string(m.tokens_per_expert[e]);
      l.put("tokens_per_expert", tokens + "]");
      layers += (layers.size() > 1 ? ", " : "") + l.done();
    }
    o.put("moe_layers", layers + "]");
  }
  return o.done();
}

std::string validation_json(int64_t iteration, const std::vector<NamedValue>& losses) {
  Object o;
  o.num("validation_iteration", iteration);
  for (const auto& [name, value] : losses) {
    o.num(name, value);
    o.num(name + " ppl", std::exp(std::min(20.0, value)));
  }
  return o.done();
}

JsonlWriter::JsonlWriter(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "a")) {
  HYTRA_CHECK(file_ != nullptr, "metrics file ", path, ": cannot open for appending: ", std::strerror(errno));
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

void JsonlWriter::write(const IterationLog& log) { write_line(iteration_json(log)); }

void JsonlWriter::write_validation(int64_t iteration, const std::vector<NamedValue>& losses) {
  write_line(validation_json(iteration, losses));
}

void JsonlWriter::write_line(const std::string& json) {
  const bool ok =
      std::fputs(json.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
  HYTRA_CHECK(ok, "metrics file ", path_, ": write failed: ", std::strerror(errno));
}

}  // namespace hytra
