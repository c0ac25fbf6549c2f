// The operations of one decoding step (decode_ops.hpp). On any device, the torch-op versions
// against references written out here (float64, token by token, no shared code). On CUDA
// (KBRL_TEST_DEVICE=cuda, where the kernels are built), the fused kernels against the torch-op
// versions on the same inputs, in float32 and bfloat16.
#include "../../libkbrl/src/model/torch/decode_ops.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "catch.hpp"
#include "kbrl/core/error.hpp"

using namespace kbrl::model::detail;

namespace {

// KBRL_TEST_DEVICE=cuda runs the tests on the GPU.
c10::Device test_device() {
  if (const char* d = std::getenv("KBRL_TEST_DEVICE"); d != nullptr && *d != '\0') return c10::Device(d);
  return c10::Device(c10::kCPU);
}

std::string name_of(at::ScalarType t) { return c10::toString(t); }

at::Tensor f64(const at::Tensor& t) { return t.to(at::kCPU, at::kDouble); }

double max_abs(const at::Tensor& t) { return f64(t).abs().max().item<double>(); }

// Elements where |a - b| > abs + rel * |b|, compared in float64.
std::int64_t mismatches(const at::Tensor& a, const at::Tensor& b, double abs, double rel) {
  const at::Tensor x = f64(a), y = f64(b);
  return ((x - y).abs() > abs + rel * y.abs()).sum().item<std::int64_t>();
}

// Elements that differ at all (the stored values, not their rounding).
std::int64_t differing(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kCPU) != b.to(at::kCPU)).sum().item<std::int64_t>();
}

// Inputs made on the CPU from a fixed seed, then moved: the same values on every device.
at::Tensor randn(at::IntArrayRef sizes, double scale, at::ScalarType dtype, c10::Device device) {
  return (at::randn(sizes, at::kFloat) * scale).to(dtype).to(device);
}

// rms_norm in float64 from the stored values: w * x / sqrt(mean(x^2) + eps) over the last dim.
at::Tensor rms_norm_ref(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor x64 = f64(x);
  return f64(w) * x64 / at::sqrt(x64.pow(2).mean(-1, true) + eps);
}

// One row of a paged attention case: each row's tokens live in a scrambled set of blocks.
struct PagedCase {
  at::Tensor q, k_pool, v_pool, tables, lens;  // on the device
  std::int64_t block_size;
};

PagedCase paged_case(std::int64_t R, std::int64_t H, std::int64_t Hkv, std::int64_t D, std::int64_t block_size,
                     std::int64_t max_ctx, at::ScalarType dtype, c10::Device device) {
  const std::int64_t W = (max_ctx + block_size - 1) / block_size, blocks = R * W + 3;
  PagedCase c;
  c.block_size = block_size;
  c.q = randn({R, H, D}, 1.5, dtype, device);
  c.k_pool = randn({blocks, block_size, Hkv, D}, 1.0, dtype, device);
  c.v_pool = randn({blocks, block_size, Hkv, D}, 1.0, dtype, device);
  // Every row gets W distinct blocks in random order, rows interleaved.
  c.tables = at::randperm(blocks, at::kLong).narrow(0, 0, R * W).view({R, W}).to(at::kInt).to(device);
  at::Tensor lens = at::randint(1, max_ctx + 1, {R}, at::kInt);
  lens[0] = 1;
  if (R > 1) lens[1] = static_cast<std::int32_t>(W * block_size);  // the whole table
  c.lens = lens.to(device);
  return c;
}

// Attention in float64, row by row and head by head over the row's gathered tokens.
at::Tensor attention_ref(const PagedCase& c, double scale) {
  const auto R = c.q.size(0), H = c.q.size(1), D = c.q.size(2), Hkv = c.k_pool.size(2), bs = c.block_size;
  const at::Tensor tables = c.tables.to(at::kCPU), lens = c.lens.to(at::kCPU), q = f64(c.q);
  const at::Tensor keys = f64(c.k_pool).view({-1, Hkv, D}), values = f64(c.v_pool).view({-1, Hkv, D});
  at::Tensor out = at::empty({R, H, D}, at::kDouble);
  for (std::int64_t r = 0; r < R; ++r) {
    std::vector<std::int64_t> slots;
    for (std::int64_t t = 0; t < lens[r].item<std::int64_t>(); ++t)
      slots.push_back(tables[r][t / bs].item<std::int64_t>() * bs + t % bs);
    const at::Tensor index = at::tensor(slots, at::kLong);
    const at::Tensor k = keys.index_select(0, index), v = values.index_select(0, index);  // [n, Hkv, D]
    for (std::int64_t h = 0; h < H; ++h) {
      const auto kvh = h / (H / Hkv);
      const at::Tensor p = at::softmax(at::matmul(k.select(1, kvh), q[r][h]) * scale, 0);
      out[r][h].copy_(at::matmul(p, v.select(1, kvh)));
    }
  }
  return out;
}

// The inverse-CDF draw, written out: the first token whose float64 running sum of p exceeds
// u * total, never past the last token of positive mass.
std::int64_t inverse_cdf(const at::Tensor& p_row, double u) {
  const at::Tensor p = f64(p_row);
  const auto* x = p.data_ptr<double>();
  const auto V = p.numel();
  double total = 0;
  std::int64_t last_positive = 0;
  for (std::int64_t i = 0; i < V; ++i) {
    total += x[i];
    if (x[i] > 0) last_positive = i;
  }
  const double target = u * total;
  double cdf = 0;
  for (std::int64_t i = 0; i < V; ++i) {
    cdf += x[i];
    if (cdf > target) return std::min(i, last_positive);
  }
  return last_positive;
}

}  // namespace

TEST_CASE("decode ops: add_rms_norm adds the residual in place and normalises") {
  const auto device = test_device();
  at::manual_seed(1);
  for (const bool with_delta : {false, true}) {
    INFO("delta " << with_delta);
    at::Tensor residual = randn({3, 96}, 2.0, at::kFloat, device);
    const at::Tensor delta = with_delta ? randn({3, 96}, 1.0, at::kFloat, device) : at::Tensor();
    const at::Tensor weight = randn({96}, 1.0, at::kFloat, device);
    const at::Tensor expected_residual = with_delta ? f64(residual) + f64(delta) : f64(residual);
    at::Tensor out = at::empty_like(residual);
    add_rms_norm(residual, delta, weight, out, 1e-6, /*portable=*/true);
    CHECK(mismatches(residual, expected_residual, 1e-6, 1e-6) == 0);
    CHECK(mismatches(out, rms_norm_ref(expected_residual, weight, 1e-6), 1e-6, 1e-5) == 0);
  }
}

TEST_CASE("decode ops: rope_write_kv rotates q and k and writes k and v to their slots") {
  const auto device = test_device();
  at::manual_seed(2);
  const std::int64_t R = 3, H = 4, Hkv = 2, D = 16, slots_n = 11;
  for (const bool norm : {false, true}) {
    INFO("q_norm / k_norm " << norm);
    const at::Tensor qkv = randn({R, (H + 2 * Hkv) * D}, 1.0, at::kFloat, device);
    const at::Tensor positions = at::tensor({5, 1000, 0}, at::kLong).to(device);
    const at::Tensor inv_freq =
        (1.0 / at::pow(10000.0, at::arange(0, D, 2, at::kDouble) / D)).to(at::kFloat).to(device);
    const at::Tensor q_norm = norm ? randn({D}, 1.0, at::kFloat, device) : at::Tensor();
    const at::Tensor k_norm = norm ? randn({D}, 1.0, at::kFloat, device) : at::Tensor();
    const at::Tensor slots = at::tensor({7, 2, 9}, at::kLong).to(device);
    at::Tensor k_pool = randn({slots_n, Hkv, D}, 1.0, at::kFloat, device);
    at::Tensor v_pool = randn({slots_n, Hkv, D}, 1.0, at::kFloat, device);
    const at::Tensor k_before = k_pool.clone(), v_before = v_pool.clone();
    const at::Tensor q = rope_write_kv(qkv, positions, inv_freq, q_norm, k_norm, 1e-6, H, Hkv, k_pool, v_pool, slots,
                                       /*portable=*/true);

    // The reference: angle = float(position) * inv_freq in float32 (as defined), the rest in
    // float64; out[j] = x[j] cos - x[j + D/2] sin, out[j + D/2] = x[j + D/2] cos + x[j] sin.
    const at::Tensor x = f64(qkv).view({R, H + 2 * Hkv, D});
    at::Tensor heads_q = x.narrow(1, 0, H), heads_k = x.narrow(1, H, Hkv);
    const at::Tensor heads_v = x.narrow(1, H + Hkv, Hkv);
    if (norm) {
      heads_q = rms_norm_ref(heads_q, q_norm, 1e-6);
      heads_k = rms_norm_ref(heads_k, k_norm, 1e-6);
    }
    const at::Tensor angle = f64(positions.to(at::kFloat).unsqueeze(1) * inv_freq).unsqueeze(1);  // [R, 1, D/2]
    const auto rotate = [&](const at::Tensor& t) {
      const at::Tensor a = t.narrow(2, 0, D / 2), b = t.narrow(2, D / 2, D / 2);
      return at::cat({a * at::cos(angle) - b * at::sin(angle), b * at::cos(angle) + a * at::sin(angle)}, 2);
    };
    CHECK(mismatches(q, rotate(heads_q), 1e-5, 1e-5) == 0);
    const at::Tensor k_rot = rotate(heads_k);
    const at::Tensor slots_cpu = slots.to(at::kCPU);
    std::vector<bool> written(slots_n, false);
    for (std::int64_t r = 0; r < R; ++r) {
      const auto s = slots_cpu[r].item<std::int64_t>();
      written[static_cast<std::size_t>(s)] = true;
      CHECK(mismatches(k_pool[s], k_rot[r], 1e-5, 1e-5) == 0);
      CHECK(mismatches(v_pool[s], heads_v[r], 0, 0) == 0);
    }
    for (std::int64_t s = 0; s < slots_n; ++s)
      if (!written[static_cast<std::size_t>(s)]) {
        INFO("untouched slot " << s);
        CHECK(at::equal(k_pool[s], k_before[s]));
        CHECK(at::equal(v_pool[s], v_before[s]));
      }
  }
}

TEST_CASE("decode ops: paged_attention equals dense attention over the gathered keys") {
  const auto device = test_device();
  at::manual_seed(3);
  // (H, Hkv, D): grouped-query heads; block tables scrambled across rows.
  for (const auto& [H, Hkv, D] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
           {4, 2, 16}, {6, 1, 32}, {3, 3, 8}}) {
    INFO("heads " << H << ", kv heads " << Hkv << ", head_dim " << D);
    const PagedCase c = paged_case(3, H, Hkv, D, 4, 37, at::kFloat, device);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const at::Tensor out = paged_attention(c.q, c.k_pool, c.v_pool, c.tables, c.lens, scale, /*portable=*/true);
    CHECK(mismatches(out, attention_ref(c, scale), 1e-5, 1e-5) == 0);
  }
}

TEST_CASE("decode ops: silu_mul is silu(gate) * up") {
  const auto device = test_device();
  at::manual_seed(4);
  const at::Tensor gate_up = randn({3, 2 * 50}, 4.0, at::kFloat, device);
  const at::Tensor g = f64(gate_up).narrow(1, 0, 50), u = f64(gate_up).narrow(1, 50, 50);
  CHECK(mismatches(silu_mul(gate_up, /*portable=*/true), g / (1 + at::exp(-g)) * u, 1e-6, 1e-5) == 0);
}

TEST_CASE("decode ops: sample_rows draws by the inverse CDF and greedy takes the argmax") {
  const auto device = test_device();
  at::manual_seed(5);
  const std::int64_t R = 6, V = 1000;
  at::Tensor logits = at::randn({R, V}, at::kFloat) * 3;
  logits[0][17] = 20.f;  // a tie at the max: greedy takes the first
  logits[0][400] = 20.f;
  // Rows 1 and 2: no mass before token 10 or after token 900, drawn at u = 0 and u -> 1.
  for (const std::int64_t r : {1, 2}) {
    logits[r].narrow(0, 0, 10).fill_(-std::numeric_limits<float>::infinity());
    logits[r].narrow(0, 901, V - 901).fill_(-std::numeric_limits<float>::infinity());
  }
  const at::Tensor uniforms = at::tensor({0.3, 0.0, 1.0 - std::ldexp(1.0, -53), 0.5, 0.999999, 0.01}, at::kDouble);
  const at::Tensor x = logits.to(device), u = uniforms.to(device);

  const auto [greedy, greedy_lp] = sample_rows(x, 0.0, u, /*portable=*/true);
  const at::Tensor lp0 = at::log_softmax(f64(logits), -1);
  for (std::int64_t r = 0; r < R; ++r) {
    INFO("row " << r);
    const auto token = greedy[r].item<std::int64_t>();
    CHECK(token == f64(logits[r]).argmax().item<std::int64_t>());
    CHECK(std::abs(greedy_lp[r].item<double>() - lp0[r][token].item<double>()) < 1e-5);
  }
  CHECK(greedy[0].item<std::int64_t>() == 17);

  for (const double temperature : {0.7, 1.0}) {
    INFO("temperature " << temperature);
    const auto [tokens, lps] = sample_rows(x, temperature, u, /*portable=*/true);
    const at::Tensor lp = at::log_softmax(logits / temperature, -1);
    const at::Tensor lp64 = at::log_softmax(f64(logits) / temperature, -1);
    for (std::int64_t r = 0; r < R; ++r) {
      INFO("row " << r);
      const auto token = tokens[r].item<std::int64_t>();
      CHECK(token == inverse_cdf(lp[r].exp(), uniforms[r].item<double>()));
      CHECK(std::abs(lps[r].item<double>() - lp64[r][token].item<double>()) < 1e-5);
    }
    CHECK(tokens[1].item<std::int64_t>() == 10);  // u = 0: the first token of positive mass
    CHECK(tokens[2].item<std::int64_t>() <= 900);  // u -> 1: never past the last one
  }
}

// ---- The CUDA kernels against the torch-op versions

namespace {

// Skips (returns false) unless the device is CUDA and the kernels are built.
bool kernels_testable(const c10::Device& device) { return device.is_cuda() && decode_kernels_built(); }

// Bounds on kernel - torch-op differences: float32 to float rounding; bfloat16 within two ulps
// (2^-7 relative), with an absolute slack (relative to the tensor's largest value) for results
// near zero that come out of cancellations.
struct Tolerance {
  double rel, abs_of_max;
};
Tolerance tolerance(at::ScalarType dtype) {
  return dtype == at::kFloat ? Tolerance{1e-5, 1e-6} : Tolerance{std::ldexp(1.0, -7), std::ldexp(1.0, -9)};
}

void check_close(const at::Tensor& kernel, const at::Tensor& ops, const char* what, double max_differing) {
  const Tolerance t = tolerance(kernel.scalar_type());
  INFO(what << " (" << name_of(kernel.scalar_type()) << ")");
  CHECK(kernel.sizes().vec() == ops.sizes().vec());
  CHECK(mismatches(kernel, ops, t.abs_of_max * max_abs(ops), t.rel) == 0);
  // In bfloat16 most results are the same bits; only roundings that fall differently differ.
  if (kernel.scalar_type() != at::kFloat) CHECK(differing(kernel, ops) <= max_differing * kernel.numel());
}

}  // namespace

TEST_CASE("decode kernels: add_rms_norm, silu_mul and rope_write_kv equal the torch ops") {
  const auto device = test_device();
  if (!kernels_testable(device))
    KBRL_SKIP("the decode kernels run on CUDA where built: KBRL_TEST_DEVICE=cuda runs this test");
  at::manual_seed(6);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const std::int64_t R : {1, 3, 64}) {
      INFO("rows " << R);
      for (const std::int64_t hidden : {1536, 4096, 1001}) {  // 1001: the unvectorised path
        INFO("hidden " << hidden);
        const at::Tensor residual = randn({R, hidden}, 3.0, dtype, device);
        const at::Tensor delta = randn({R, hidden}, 1.0, dtype, device);
        const at::Tensor weight = (at::rand({hidden}) + 0.5).to(dtype).to(device);
        at::Tensor res_k = residual.clone(), res_o = residual.clone();
        at::Tensor out_k = at::empty_like(residual), out_o = at::empty_like(residual);
        add_rms_norm(res_k, delta, weight, out_k, 1e-6, false);
        add_rms_norm(res_o, delta, weight, out_o, 1e-6, true);
        CHECK(at::equal(res_k, res_o));
        check_close(out_k, out_o, "add_rms_norm", 1e-3);
        add_rms_norm(res_k, at::Tensor(), weight, out_k, 1e-6, false);
        add_rms_norm(res_o, at::Tensor(), weight, out_o, 1e-6, true);
        CHECK(at::equal(res_k, res_o));
        check_close(out_k, out_o, "rms_norm without delta", 1e-3);
      }
      for (const std::int64_t inter : {18944, 1001}) {
        INFO("inter " << inter);
        const at::Tensor gate_up = randn({R, 2 * inter}, 4.0, dtype, device);
        check_close(silu_mul(gate_up, false), silu_mul(gate_up, true), "silu_mul", 1e-4);
      }
      for (const auto& [H, Hkv, D, norm] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t, bool>>{
               {12, 2, 128, false}, {8, 8, 64, false}, {28, 4, 128, false}, {16, 1, 128, true}}) {
        INFO("heads " << H << ", kv heads " << Hkv << ", head_dim " << D << ", q/k norm " << norm);
        const std::int64_t slots_n = 3 * R + 5;
        const at::Tensor qkv = randn({R, (H + 2 * Hkv) * D}, 1.0, dtype, device);
        const at::Tensor positions = at::randint(0, 120000, {R}, at::kLong).to(device);
        const at::Tensor inv_freq =
            (1.0 / at::pow(1000000.0, at::arange(0, D, 2, at::kDouble) / D)).to(at::kFloat).to(device);
        const at::Tensor q_norm = norm ? (at::rand({D}) + 0.5).to(dtype).to(device) : at::Tensor();
        const at::Tensor k_norm = norm ? (at::rand({D}) + 0.5).to(dtype).to(device) : at::Tensor();
        const at::Tensor slots = at::randperm(slots_n, at::kLong).narrow(0, 0, R).to(device);
        const at::Tensor k_pool = randn({slots_n, Hkv, D}, 1.0, dtype, device);
        const at::Tensor v_pool = randn({slots_n, Hkv, D}, 1.0, dtype, device);
        at::Tensor k_k = k_pool.clone(), v_k = v_pool.clone(), k_o = k_pool.clone(), v_o = v_pool.clone();
        const at::Tensor q_k =
            rope_write_kv(qkv, positions, inv_freq, q_norm, k_norm, 1e-6, H, Hkv, k_k, v_k, slots, false);
        const at::Tensor q_o =
            rope_write_kv(qkv, positions, inv_freq, q_norm, k_norm, 1e-6, H, Hkv, k_o, v_o, slots, true);
        check_close(q_k, q_o, "rope q", 1e-3);
        check_close(k_k, k_o, "rope k_pool", 1e-3);
        CHECK(at::equal(v_k, v_o));
        if (!norm) {  // without the norm's reduction, every rounding is the torch ops' own
          CHECK(at::equal(q_k, q_o));
          CHECK(at::equal(k_k, k_o));
        }
      }
    }
  }
}

TEST_CASE("decode kernels: paged_attention equals the torch ops") {
  const auto device = test_device();
  if (!kernels_testable(device))
    KBRL_SKIP("the decode kernels run on CUDA where built: KBRL_TEST_DEVICE=cuda runs this test");
  at::manual_seed(7);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const std::int64_t R : {1, 3, 64}) {
      for (const auto& [H, Hkv, D] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
               {12, 2, 128}, {8, 8, 64}, {28, 4, 128}, {16, 1, 128}}) {
        // Contexts up to 3000 tokens (several partitions), and up to 500 (one).
        for (const std::int64_t max_ctx : {3000, 500}) {
          INFO("rows " << R << ", heads " << H << ", kv heads " << Hkv << ", head_dim " << D << ", contexts up to "
                       << max_ctx);
          const PagedCase c = paged_case(R, H, Hkv, D, 16, max_ctx, dtype, device);
          const double scale = 1.0 / std::sqrt(static_cast<double>(D));
          const at::Tensor k = paged_attention(c.q, c.k_pool, c.v_pool, c.tables, c.lens, scale, false);
          const at::Tensor o = paged_attention(c.q, c.k_pool, c.v_pool, c.tables, c.lens, scale, true);
          check_close(k, o, "paged_attention", 0.02);
        }
      }
    }
  }
  // Other block sizes, and groups of more than 16 query heads per kv head.
  for (const auto& [bs, H, Hkv] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
           {8, 12, 2}, {32, 12, 2}, {4, 8, 2}, {16, 32, 1}}) {
    INFO("block size " << bs << ", heads " << H << ", kv heads " << Hkv);
    const PagedCase c = paged_case(3, H, Hkv, 128, bs, 1500, at::kBFloat16, device);
    const at::Tensor k = paged_attention(c.q, c.k_pool, c.v_pool, c.tables, c.lens, 0.1, false);
    const at::Tensor o = paged_attention(c.q, c.k_pool, c.v_pool, c.tables, c.lens, 0.1, true);
    check_close(k, o, "paged_attention", 0.02);
  }
}

TEST_CASE("decode kernels: paged_attention leaves its counters zero, so that one buffer serves every call") {
  const auto device = test_device();
  if (!kernels_testable(device))
    KBRL_SKIP("the decode kernels run on CUDA where built: KBRL_TEST_DEVICE=cuda runs this test");
  at::manual_seed(9);
  // Contexts up to 3000 tokens over 5 rows: many partitions, merged by the last of each row's.
  const std::int64_t R = 5, H = 12, Hkv = 2, D = 128;
  const PagedCase c = paged_case(R, H, Hkv, D, 16, 3000, at::kBFloat16, device);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::int64_t needed = paged_attention_counters(R, H, Hkv);
  CHECK(needed > 0);
  CHECK(needed <= R * H);
  const at::Tensor counters = at::zeros({R * H}, at::TensorOptions().dtype(at::kInt).device(device));
  const auto attend = [&](const at::Tensor& counts) {
    return paged_attention(c.q, c.k_pool, c.v_pool, c.tables, c.lens, scale, false, counts);
  };
  const at::Tensor first = attend(counters);
  CHECK(counters.count_nonzero().item<std::int64_t>() == 0);
  const at::Tensor second = attend(counters);
  CHECK(counters.count_nonzero().item<std::int64_t>() == 0);
  CHECK(at::equal(first.to(at::kCPU), second.to(at::kCPU)));
  CHECK(at::equal(first.to(at::kCPU), attend(at::Tensor()).to(at::kCPU)));  // counters of the call's own
  check_close(first, paged_attention(c.q, c.k_pool, c.v_pool, c.tables, c.lens, scale, true), "paged_attention",
              0.02);
  // Counters that break the contract are refused.
  const at::TensorOptions on_device = at::TensorOptions().device(device);
  CHECK_THROWS_AS(attend(at::zeros({R * H}, on_device.dtype(at::kLong))), kbrl::core::InvalidArgument);
  CHECK_THROWS_AS(attend(at::zeros({needed - 1}, on_device.dtype(at::kInt))), kbrl::core::InvalidArgument);
  CHECK_THROWS_AS(attend(at::zeros({R * H}, at::kInt)), kbrl::core::InvalidArgument);  // on the CPU
}

TEST_CASE("decode kernels: sample_rows draws the torch ops' tokens") {
  const auto device = test_device();
  if (!kernels_testable(device))
    KBRL_SKIP("the decode kernels run on CUDA where built: KBRL_TEST_DEVICE=cuda runs this test");
  at::manual_seed(8);
  const std::int64_t R = 256, V = 151936;
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    at::Tensor logits = at::randn({R, V}, at::kFloat) * 4;
    logits[0][5] = 40.f;  // a tie at the max
    logits[0][77] = 40.f;
    logits[1][3] = 60.f;  // nearly all the mass on one token
    logits[2].narrow(0, 100000, V - 100000).fill_(-std::numeric_limits<float>::infinity());  // a tail of no mass
    const at::Tensor x = logits.to(dtype).to(device);
    at::Tensor uniforms = at::rand({R}, at::kDouble);
    uniforms[2] = 1.0 - std::ldexp(1.0, -53);
    uniforms[3] = 0.0;
    const at::Tensor u = uniforms.to(device);
    for (const double temperature : {0.0, 0.7, 1.0}) {
      INFO(name_of(dtype) << ", temperature " << temperature);
      const auto [tokens_k, lp_k] = sample_rows(x, temperature, u, false);
      const auto [tokens_o, lp_o] = sample_rows(x, temperature, u, true);
      CHECK(at::equal(tokens_k.to(at::kCPU), tokens_o.to(at::kCPU)));
      CHECK(mismatches(lp_k, lp_o, 1e-5, 1e-6) == 0);
      if (temperature == 0) CHECK(tokens_k[0].item<std::int64_t>() == 5);
      if (temperature != 0) CHECK(tokens_k[2].item<std::int64_t>() < 100000);
    }
  }
}
