// Fused CUDA kernels of one decoding step, behind decode_kernels.hpp: RMSNorm with the residual
// add, rotary embedding with the KV-cache write, paged decode attention, SiLU-and-multiply and
// the sampler's draw. Plain CUDA runtime, no torch header.
//
// Each kernel reproduces the torch-op reference of decode_ops.cpp: statistics in fp32, and the
// result of every op that torch rounds to the storage dtype rounded at the same place. Where torch
// runs a multiply and an add as two ops, the float32 path writes them as __fmul_rn / __fadd_rn so
// that the compiler cannot contract them into one FMA (which would round once instead of twice).
// Launch shapes depend only on the sizes passed, never on device data, so that a CUDA graph can
// capture every launch.
//
// On sm_90 and newer every kernel is launched with programmatic dependent launch: it may start
// while the kernel before it in the stream drains, loads the constant model data it needs (norm
// weights, inv_freq), and waits for that kernel's results in wait_for_producers() before it
// reads or writes anything else (see "Programmatic dependent launch" below).
#include "decode_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace kbrl::model::cuda {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------------------------
// Element types and vectors

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// x rounded to T (to nearest, ties to even) and widened again: what a torch op of dtype T stores.
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<T>(x));
}

// N elements moved by one load or store (two for 32 bytes: alignment is capped at 16).
template <typename T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Vec {
  T v[N];
};

template <int N, typename T>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <int N, typename T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

// ---------------------------------------------------------------------------------------------
// Reductions

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// The sum over the block (blockDim.x a multiple of 32), returned to every thread. scratch: 32
// floats of shared memory, used once.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// N sums or maxima over the block at once, returned to every thread (all threads get the same
// values: the warps' results are combined in one fixed order). scratch: [warps][N], reusable
// right after the call.
template <int N, bool kMax>
__device__ __forceinline__ void block_reduce(float (&v)[N], float (*scratch)[N]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(kFullMask, v[i], o);
      v[i] = kMax ? fmaxf(v[i], other) : v[i] + other;
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch[warp][i] = v[i];
  }
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float r = scratch[0][i];
    for (int w = 1; w < warps; ++w) r = kMax ? fmaxf(r, scratch[w][i]) : r + scratch[w][i];
    v[i] = r;
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Host helpers

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }  // null passes

void require(bool ok, const char* function, const std::string& message) {
  if (!ok) throw std::invalid_argument(std::string("decode kernels: ") + function + ": " + message);
}

// Throws if the launch returned an error (`e`) or left one behind.
void check_launch(const char* kernel, cudaError_t e = cudaSuccess) {
  const cudaError_t last = cudaGetLastError();
  if (e == cudaSuccess) e = last;
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("decode kernels: launching ") + kernel + " failed: " + cudaGetErrorString(e));
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------
// Programmatic dependent launch (sm_90 and newer)
//
// A kernel launched with programmatic stream serialization may start once every CTA of the
// kernel before it in the stream has called allow_dependents() or exited, so that its launch and
// its first loads overlap that kernel's tail. Its wait_for_producers() then returns once that
// kernel has completed and its writes are visible. The rule every kernel below follows: before
// wait_for_producers() it reads only constant model data (norm weights, inv_freq: nothing a
// kernel of the step writes) and writes nothing. Each kernel calls allow_dependents() right
// after its wait: the next kernel may then start its own prologue, but still waits for this one
// to complete in its own wait_for_producers(). Since every kernel waits before it allows its
// dependents, at most the kernel just before a kernel is still running when it starts.
//
// Both compile to nothing before sm_90; both are no-ops in a kernel launched without the
// attribute.

__device__ __forceinline__ void wait_for_producers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Compiled like the kernels: its PTX version tells which code of this file a device runs.
__global__ void pdl_probe_kernel() {}

constexpr int kPdlDevices = 64;  // devices whose answer is cached; others ask every time

// Whether launches on the current device use programmatic dependent launch: KBRL_DECODE_PDL is
// not "0", the device's compute capability is 9.0 or newer, and the code of this file it runs was
// compiled for sm_90 or newer (code for older architectures, run through the JIT, has no wait in
// its kernels). The environment is read once, each device asked once.
bool pdl_enabled() {
  static const bool allowed = [] {
    const char* v = std::getenv("KBRL_DECODE_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (!allowed) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // the launch reports the device's trouble
    return false;
  }
  static std::atomic<int> known[kPdlDevices];  // 0: not asked yet, 1: no, 2: yes
  if (device >= 0 && device < kPdlDevices) {
    const int k = known[device].load(std::memory_order_relaxed);
    if (k != 0) return k == 2;
  }
  int major = 0;
  cudaFuncAttributes attributes{};
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaFuncGetAttributes(&attributes, pdl_probe_kernel) != cudaSuccess) {
    cudaGetLastError();  // a plain launch this time; asked again next time
    return false;
  }
  const bool yes = major >= 9 && attributes.ptxVersion >= 90;
  if (device >= 0 && device < kPdlDevices) known[device].store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream
// serialization where pdl_enabled() says so; `name` names it in errors.
template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  if (pdl_enabled()) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  check_launch(name, cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// Calls f with a value of the element type of `dtype`.
template <typename F>
void with_type(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::kFloat32: f(float{}); return;
    case Dtype::kBFloat16: f(__nv_bfloat16{}); return;
    case Dtype::kFloat16: f(__half{}); return;
  }
  throw std::invalid_argument("decode kernels: unknown dtype");
}

// =============================================================================================
// add_rms_norm: one block per row. The row stays in registers between the sum of squares and
// the output (CACHE vectors a thread; longer rows read their tail again). Rows of up to
// kNormPrefetchThreads * 4 vectors take the variant with CACHE = 4 (four vectors a thread: all
// of them in registers), which also loads the weight of its vectors into registers before the
// wait, so that the output waits on no load. Longer rows take CACHE = 8 with up to 1024 threads:
// no registers left for the weight, which is loaded at the output.

constexpr int kNormPrefetchCache = 4;      // the variant that prefetches the weight
constexpr int kNormPrefetchThreads = 512;  // its most threads (128 registers each)
constexpr int kNormMaxCache = 8;

template <typename T, int VEC, int CACHE>
__global__ void __launch_bounds__(CACHE == kNormPrefetchCache ? kNormPrefetchThreads : 1024)
    add_rms_norm_kernel(T* residual, const T* __restrict__ delta, const T* __restrict__ weight, T* out,
                        int hidden, float eps) {
  using V = Vec<T, VEC>;
  constexpr int kWeights = CACHE <= kNormPrefetchCache ? CACHE : 0;  // weight vectors held
  __shared__ float scratch[32];
  const int vectors = hidden / VEC;
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * hidden;
  T* res = residual + base;
  const T* del = delta != nullptr ? delta + base : nullptr;

  // The weight is model data: loaded before the wait.
  V wcache[kWeights > 0 ? kWeights : 1];
#pragma unroll
  for (int c = 0; c < kWeights; ++c) {
    const int i = threadIdx.x + c * blockDim.x;
    if (i < vectors) wcache[c] = load_vec<VEC>(weight + i * VEC);
  }
  wait_for_producers();
  allow_dependents();

  // residual += delta (each sum rounded to T, written back), and the sum of squares.
  auto load = [&](int i) {
    V x = load_vec<VEC>(res + i * VEC);
    if (del != nullptr) {
      const V d = load_vec<VEC>(del + i * VEC);
#pragma unroll
      for (int e = 0; e < VEC; ++e) x.v[e] = from_float<T>(to_float(x.v[e]) + to_float(d.v[e]));
      store_vec<VEC>(res + i * VEC, x);
    }
    return x;
  };
  float ss = 0.f;
  V cache[CACHE];
#pragma unroll
  for (int c = 0; c < CACHE; ++c) {
    const int i = threadIdx.x + c * blockDim.x;
    if (i < vectors) {
      cache[c] = load(i);
#pragma unroll
      for (int e = 0; e < VEC; ++e) ss += to_float(cache[c].v[e]) * to_float(cache[c].v[e]);
    }
  }
  for (int i = threadIdx.x + CACHE * blockDim.x; i < vectors; i += blockDim.x) {
    const V x = load(i);
#pragma unroll
    for (int e = 0; e < VEC; ++e) ss += to_float(x.v[e]) * to_float(x.v[e]);
  }
  // torch: x * rsqrt(mean(x^2) + eps), the mean being sum * (1 / hidden).
  const float inv = rsqrtf(block_sum(ss, scratch) * (1.0f / static_cast<float>(hidden)) + eps);

  // out = weight * (x * inv cast to T), the product rounded to T.
  auto emit = [&](int i, const V& x, const V& w) {
    V o;
#pragma unroll
    for (int e = 0; e < VEC; ++e) o.v[e] = from_float<T>(to_float(w.v[e]) * round_to<T>(to_float(x.v[e]) * inv));
    store_vec<VEC>(out + base + i * VEC, o);
  };
#pragma unroll
  for (int c = 0; c < CACHE; ++c) {
    const int i = threadIdx.x + c * blockDim.x;
    if (i < vectors) emit(i, cache[c], c < kWeights ? wcache[c] : load_vec<VEC>(weight + i * VEC));
  }
  // The same thread wrote these (or nobody did): reading them back is ordered.
  for (int i = threadIdx.x + CACHE * blockDim.x; i < vectors; i += blockDim.x)
    emit(i, load_vec<VEC>(res + i * VEC), load_vec<VEC>(weight + i * VEC));
}

template <typename T, int VEC>
void launch_add_rms_norm(void* residual, const void* delta, const void* weight, void* out, int rows, int hidden,
                         float eps, cudaStream_t stream) {
  const int vectors = hidden / VEC;
  // About four vectors a thread: enough loads in flight, few idle threads on short rows.
  const int threads = std::min(1024, std::max(32, ceil_div(ceil_div(vectors, 4), 32) * 32));
  // Up to kNormPrefetchThreads threads, a thread has at most four vectors: the cache of four
  // holds them all, and the sums run in the same order as with the cache of eight.
  auto kernel = threads <= kNormPrefetchThreads ? add_rms_norm_kernel<T, VEC, kNormPrefetchCache>
                                                : add_rms_norm_kernel<T, VEC, kNormMaxCache>;
  launch("add_rms_norm", kernel, dim3(rows), dim3(threads), 0, stream, static_cast<T*>(residual),
         static_cast<const T*>(delta), static_cast<const T*>(weight), static_cast<T*>(out), hidden, eps);
}

// =============================================================================================
// rope_write_kv: one block per row. The block computes the row's cos / sin (rounded to T) into
// shared memory, and groups of `lanes` threads take one head each: q heads (normalised with
// q_norm, rotated, to q_out), k heads (k_norm, rotated, to k_pool at the row's slot) and v heads
// (copied to v_pool). A thread handles element pairs (j, j + D/2) together, as the rotation
// mixes them. The loads of a thread's first head (and its norm weight, before the wait) are
// issued before cos / sin are computed, so that they are in flight meanwhile.

constexpr int kRopeThreads = 128;
constexpr int kRopeCache = 4;

template <typename T, int VEC>
__global__ void __launch_bounds__(kRopeThreads)
    rope_write_kv_kernel(const T* __restrict__ qkv, const std::int64_t* __restrict__ positions,
                         const float* __restrict__ inv_freq, const T* __restrict__ q_norm,
                         const T* __restrict__ k_norm, float eps, T* __restrict__ q_out, T* __restrict__ k_pool,
                         T* __restrict__ v_pool, const std::int64_t* __restrict__ slots, int heads, int kv_heads,
                         int head_dim, int lanes) {
  using V = Vec<T, VEC>;
  extern __shared__ float cos_sin[];  // [half] cos, then [half] sin
  const int row = blockIdx.x;
  const int half = head_dim / 2;
  const int units = heads + 2 * kv_heads;
  const int groups = static_cast<int>(blockDim.x) / lanes, group = threadIdx.x / lanes, sub = threadIdx.x % lanes;
  const int items = half / VEC;  // vector pairs of a head
  const T* src_row = qkv + static_cast<std::size_t>(row) * units * head_dim;
  const float inv_dim = 1.0f / static_cast<float>(head_dim);
  // The norm weight of unit u: q_norm for q heads, k_norm for k heads, none for v heads.
  auto norm_of = [&](int u) { return u < heads ? q_norm : u < heads + kv_heads ? k_norm : nullptr; };

  // A thread's pairs of its current head (lo, hi) and of the head's norm weight (wlo, whi), for
  // the first kRopeCache of them; heads of more pairs read the rest at the output.
  V lo[kRopeCache], hi[kRopeCache], wlo[kRopeCache], whi[kRopeCache];
  auto load_weight = [&](int u) {
    const T* w = u < units ? norm_of(u) : nullptr;
    if (w == nullptr) return;
#pragma unroll
    for (int c = 0; c < kRopeCache; ++c) {
      const int i = sub + c * lanes;
      if (i < items) {
        wlo[c] = load_vec<VEC>(w + i * VEC);
        whi[c] = load_vec<VEC>(w + half + i * VEC);
      }
    }
  };
  auto load_head = [&](int u) {
    if (u >= units) return;
    const T* src = src_row + static_cast<std::size_t>(u) * head_dim;
#pragma unroll
    for (int c = 0; c < kRopeCache; ++c) {
      const int i = sub + c * lanes;
      if (i < items) {
        lo[c] = load_vec<VEC>(src + i * VEC);
        hi[c] = load_vec<VEC>(src + half + i * VEC);
      }
    }
  };

  // Model data before the wait: the first round's norm weight and this thread's first frequency.
  load_weight(group);
  const float freq = static_cast<int>(threadIdx.x) < half ? inv_freq[threadIdx.x] : 0.f;
  wait_for_producers();
  allow_dependents();
  const std::int64_t position_index = positions[row];
  const std::int64_t slot = slots[row];
  load_head(group);

  // torch: positions.to(float) * inv_freq in fp32, cos / sin (accurate: positions reach 1e5),
  // then cast to the dtype.
  const float position = static_cast<float>(position_index);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = __fmul_rn(position, i == static_cast<int>(threadIdx.x) ? freq : inv_freq[i]);
    cos_sin[i] = round_to<T>(cosf(angle));
    cos_sin[half + i] = round_to<T>(sinf(angle));
  }
  __syncthreads();

  // Every thread runs the same number of rounds (the shuffles below need the whole warp).
  for (int first = 0; first < units; first += groups) {
    const int u = first + group;
    if (first > 0) {
      load_weight(u);
      load_head(u);
    }
    const bool valid = u < units;
    const T* src = src_row + static_cast<std::size_t>(u) * head_dim;
    T* dst;
    const T* w = norm_of(u);
    bool rotate = true;
    if (u < heads) {
      dst = q_out + (static_cast<std::size_t>(row) * heads + u) * head_dim;
    } else if (u < heads + kv_heads) {
      dst = k_pool + (static_cast<std::size_t>(slot) * kv_heads + (u - heads)) * head_dim;
    } else {
      dst = v_pool + (static_cast<std::size_t>(slot) * kv_heads + (u - heads - kv_heads)) * head_dim;
      rotate = false;
    }

    float ss = 0.f;
    auto square_sum = [](const V& x) {
      float s = 0.f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) s += to_float(x.v[e]) * to_float(x.v[e]);
      return s;
    };
    if (valid && w != nullptr) {
#pragma unroll
      for (int c = 0; c < kRopeCache; ++c) {
        const int i = sub + c * lanes;
        if (i < items) ss += square_sum(lo[c]) + square_sum(hi[c]);
      }
      for (int i = sub + kRopeCache * lanes; i < items; i += lanes)
        ss += square_sum(load_vec<VEC>(src + i * VEC)) + square_sum(load_vec<VEC>(src + half + i * VEC));
    }
    // The head's sum of squares over its `lanes` threads (aligned groups of a power of two).
    for (int o = lanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(kFullMask, ss, o);
    const float inv = rsqrtf(ss * inv_dim + eps);

    // a, b: the pair's head elements; wa, wb: its norm weight (read only when w is set).
    auto emit = [&](int i, const V& a, const V& b, const V& wa, const V& wb) {
      const int j = i * VEC;
      if (!rotate) {
        store_vec<VEC>(dst + j, a);
        store_vec<VEC>(dst + half + j, b);
        return;
      }
      float x[VEC], y[VEC];  // elements j.. (first half) and half + j.. (second half)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        x[e] = to_float(a.v[e]);
        y[e] = to_float(b.v[e]);
      }
      if (w != nullptr) {  // rms_norm: weight * (x * inv cast to T), rounded to T
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          x[e] = round_to<T>(to_float(wa.v[e]) * round_to<T>(x[e] * inv));
          y[e] = round_to<T>(to_float(wb.v[e]) * round_to<T>(y[e] * inv));
        }
      }
      // x * cos + rotate_half(x) * sin, rotate_half(x) = (-y, x); each product and the sum
      // rounded to T.
      V oa, ob;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float c = cos_sin[j + e], s = cos_sin[half + j + e];
        oa.v[e] = from_float<T>(__fadd_rn(round_to<T>(__fmul_rn(x[e], c)), round_to<T>(__fmul_rn(-y[e], s))));
        ob.v[e] = from_float<T>(__fadd_rn(round_to<T>(__fmul_rn(y[e], c)), round_to<T>(__fmul_rn(x[e], s))));
      }
      store_vec<VEC>(dst + j, oa);
      store_vec<VEC>(dst + half + j, ob);
    };
    if (valid) {
#pragma unroll
      for (int c = 0; c < kRopeCache; ++c) {
        const int i = sub + c * lanes;
        if (i < items) emit(i, lo[c], hi[c], wlo[c], whi[c]);
      }
      for (int i = sub + kRopeCache * lanes; i < items; i += lanes) {
        const V none{};
        const bool norm = w != nullptr;
        emit(i, load_vec<VEC>(src + i * VEC), load_vec<VEC>(src + half + i * VEC),
             norm ? load_vec<VEC>(w + i * VEC) : none, norm ? load_vec<VEC>(w + half + i * VEC) : none);
      }
    }
  }
}

template <typename T, int VEC>
void launch_rope_write_kv(const void* qkv, const std::int64_t* positions, const float* inv_freq, const void* q_norm,
                          const void* k_norm, float eps, void* q_out, void* k_pool, void* v_pool,
                          const std::int64_t* slots, int rows, int heads, int kv_heads, int head_dim,
                          cudaStream_t stream) {
  const int items = head_dim / 2 / VEC;
  int lanes = 1;  // threads per head: a power of two, up to a warp
  while (lanes < items && lanes < 32) lanes *= 2;
  const std::size_t smem = static_cast<std::size_t>(head_dim) * sizeof(float);
  launch("rope_write_kv", rope_write_kv_kernel<T, VEC>, dim3(rows), dim3(kRopeThreads), smem, stream,
         static_cast<const T*>(qkv), positions, inv_freq, static_cast<const T*>(q_norm),
         static_cast<const T*>(k_norm), eps, static_cast<T*>(q_out), static_cast<T*>(k_pool),
         static_cast<T*>(v_pool), slots, heads, kv_heads, head_dim, lanes);
}

// =============================================================================================
// paged_attention: one CTA per (partition, kv head, chunk of up to 16 query heads of its group,
// row), so that each key and value element is read once for all the query heads that share it.
// Key tiles, then value tiles, stream through one ring of kAttnStages shared-memory buffers
// (cp.async, two tiles in flight while the CTA computes on a third); rows are padded so that the
// 16-byte reads below hit distinct banks.
//
//   1. q . k: kTpt threads share a token, each taking every kTpt-th 16-byte chunk of its key
//      row against the queries (fp32, in shared memory); shuffles add their partial dots.
//      Scores [token][head] stay in shared memory.
//   2. After the last key tile, softmax over the partition: per-head max, exp, sum (fp32).
//   3. p . v: kTpv threads share a value row (kDpt dims each) and kStreams such teams walk the
//      tile's tokens; their accumulators are summed in a fixed order through shared memory.
//
// Partitions that start past a row's context length return at once; the others are the row's
// active partitions. Where a row has one, its CTA writes out = acc / sum rounded to the dtype.
// Where it has several, each writes (max, sum, acc) to the workspace, and the last of them to
// finish merges them: every CTA of a (row, kv head, chunk) counts itself on that triple's counter
// (an atomic add after a fence that publishes its partial), and the one that brings the count to
// the number of active partitions resets the counter to zero and computes, per head and dim,
// m = max_p m_p, out = sum_p e^(m_p - m) acc_p / sum_p e^(m_p - m) l_p over the partitions in
// order. The counters are zero again when the kernel ends, so one buffer serves every call.

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnStages = 3;         // tile buffers of the ring
constexpr int kAttnMaxGroup = 16;      // query heads a CTA takes at most

// The context is split into partitions so that a step has about two waves of CTAs on a large GPU
// whatever the batch: a batch of one row with two key heads would otherwise run on two
// multiprocessors, each streaming the whole context alone. Partitions hold whole key tiles and at
// most kAttnMaxPart tokens (the scores of a partition sit in shared memory).
constexpr int kAttnTargetCtas = 264;
constexpr int kAttnMinPart = 64;
constexpr int kAttnMaxPart = 512;

struct AttnSplit {
  int part_tokens;
  int num_parts;
};

// Query heads a CTA takes: the key head's group, rounded up to a kernel variant (1, 2, 4, 6, 8, 16).
int attention_group_chunk(int group) {
  return group <= 2 ? group : group <= 4 ? 4 : group <= 6 ? 6 : group <= 8 ? 8 : kAttnMaxGroup;
}

// CTAs per (row, partition): one per key head and chunk of its query heads.
int attention_head_chunks(int heads, int kv_heads) {
  const int group = heads / kv_heads;
  return ceil_div(group, attention_group_chunk(group));
}

AttnSplit attention_split(int rows, int heads, int kv_heads, int max_tokens) {
  const int per_part = std::max(1, rows * kv_heads * attention_head_chunks(heads, kv_heads));
  const int wanted = ceil_div(kAttnTargetCtas, per_part);
  const int part = std::min(kAttnMaxPart, std::max(kAttnMinPart, ceil_div(ceil_div(max_tokens, wanted), 32) * 32));
  if (part >= max_tokens) return {max_tokens, 1};
  return {part, ceil_div(max_tokens, part)};
}

__host__ __device__ constexpr std::size_t round16(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

template <typename T, int D, int GC>
struct AttnShape {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements of a 16-byte chunk
  static constexpr int kChunks = D / kVec;                       // chunks of a key row
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(T));
  // Threads per token in q . k. Small groups are bound by memory: tiles of 32 tokens (4 threads
  // a token) keep the buffers small, so that four CTAs, with two tiles each in flight, share a
  // multiprocessor. Groups of 6 and more are bound by the arithmetic: tiles of 64 tokens (2
  // threads a token, for rows up to 256 bytes) halve the shuffles of the partial dots.
  static constexpr int kTpt = GC >= 6 && kRowBytes <= 256 ? 2 : 4;
  static constexpr int kTileTokens = kAttnThreads / kTpt;
  // Thread `part` of a token takes chunks part, part + kTpt, ...; rows padded by 16 bytes per
  // thread of a token. A quarter warp (8 / kTpt tokens, kTpt threads each) then reads 8 distinct
  // 16-byte bank groups of keys (row sizes are multiples of 128 bytes), and kTpt distinct bank
  // groups of queries.
  static constexpr int kPaddedRow = kRowBytes + 16 * kTpt;
  static constexpr int kTileBytes = kTileTokens * kPaddedRow;
  static constexpr int kDpt = kVec < 64 / GC ? kVec : 64 / GC;  // value dims per thread: acc <= 64 floats
  static constexpr int kTpv = D / kDpt;                          // threads per value row
  static constexpr int kStreams = kAttnThreads / kTpv;
  static_assert(kRowBytes % 128 == 0, "key rows must be a multiple of 128 bytes");
  static_assert(kChunks % kTpt == 0, "chunks must split evenly over a token's threads");
  static_assert(kDpt % 4 == 0 && kTpv <= kAttnThreads && kAttnThreads % kTpv == 0, "bad value split");
  // CTAs per multiprocessor the registers must allow: four for small groups (128 registers a
  // thread); larger groups keep their registers (shared memory allows two or three anyway).
  static constexpr int kMinBlocks = GC <= 4 ? 4 : 1;

  // Shared memory: q [GC][D] f32 | token rows [part_tokens] u32 | scores [part_tokens][GC] f32 |
  // ring [kAttnStages] tiles; the streams' sums [kStreams][GC][D] f32 reuse scores and ring.
  __host__ __device__ static constexpr std::size_t q_bytes() { return sizeof(float) * GC * D; }
  __host__ __device__ static constexpr std::size_t rows_bytes(int part_tokens) {
    return round16(sizeof(unsigned) * part_tokens);
  }
  __host__ __device__ static constexpr std::size_t score_bytes(int part_tokens) {
    return round16(sizeof(float) * GC * part_tokens);
  }
  static std::size_t smem_bytes(int part_tokens) {
    const std::size_t ring = static_cast<std::size_t>(kAttnStages) * kTileBytes;
    const std::size_t merge = sizeof(float) * kStreams * GC * D;
    return q_bytes() + rows_bytes(part_tokens) + std::max(score_bytes(part_tokens) + ring, merge);
  }
};

// GC probabilities (or scores) of token t, from scores [t][GC].
template <int GC>
__device__ __forceinline__ void load_row(const float* scores, int t, float (&p)[GC]) {
  const float* s = scores + static_cast<std::size_t>(t) * GC;
  if constexpr (GC % 4 == 0) {
#pragma unroll
    for (int g = 0; g < GC; g += 4) {
      const float4 v = *reinterpret_cast<const float4*>(s + g);
      p[g] = v.x;
      p[g + 1] = v.y;
      p[g + 2] = v.z;
      p[g + 3] = v.w;
    }
  } else if constexpr (GC % 2 == 0) {
#pragma unroll
    for (int g = 0; g < GC; g += 2) {
      const float2 v = *reinterpret_cast<const float2*>(s + g);
      p[g] = v.x;
      p[g + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int g = 0; g < GC; ++g) p[g] = s[g];
  }
}

template <int GC>
__device__ __forceinline__ void store_row(float* scores, int t, const float (&p)[GC]) {
  float* s = scores + static_cast<std::size_t>(t) * GC;
  if constexpr (GC % 4 == 0) {
#pragma unroll
    for (int g = 0; g < GC; g += 4) *reinterpret_cast<float4*>(s + g) = make_float4(p[g], p[g + 1], p[g + 2], p[g + 3]);
  } else if constexpr (GC % 2 == 0) {
#pragma unroll
    for (int g = 0; g < GC; g += 2) *reinterpret_cast<float2*>(s + g) = make_float2(p[g], p[g + 1]);
  } else {
#pragma unroll
    for (int g = 0; g < GC; ++g) s[g] = p[g];
  }
}

template <typename T, int D, int GC>
__global__ void __launch_bounds__(kAttnThreads, (AttnShape<T, D, GC>::kMinBlocks))
    paged_attention_kernel(const T* __restrict__ q, const T* __restrict__ k_pool, const T* __restrict__ v_pool,
                           const std::int32_t* __restrict__ block_tables,
                           const std::int32_t* __restrict__ context_lens, T* __restrict__ out,
                           float* __restrict__ ws_acc, float* __restrict__ ws_ml, std::int32_t* __restrict__ counters,
                           int heads, int kv_heads, int head_chunks, int block_size, int max_blocks,
                           int part_tokens, int num_parts, float scale) {
  using S = AttnShape<T, D, GC>;
  using KV = Vec<T, S::kVec>;
  using VV = Vec<T, S::kDpt>;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float scratch[kAttnWarps][GC];
  __shared__ float head_max[GC], head_sum[GC];
  __shared__ int merges;  // whether this CTA is the last of its row's active partitions

  const int tid = threadIdx.x;
  const int part = blockIdx.x;
  const int kvh = blockIdx.y / head_chunks, chunk = blockIdx.y % head_chunks;
  const int row = blockIdx.z;
  const int group = heads / kv_heads;
  const int g_count = min(GC, group - chunk * GC);  // query heads of this CTA
  const int h0 = kvh * group + chunk * GC;          // the first of them
  const int max_tokens = max_blocks * block_size;
  // Everything below reads what earlier kernels wrote (q, the pools, the tables, the lengths).
  wait_for_producers();
  allow_dependents();
  const int start = part * part_tokens;
  const int stored_len = context_lens[row];

  float* q_s = reinterpret_cast<float*>(smem);
  unsigned* rows_s = reinterpret_cast<unsigned*>(smem + S::q_bytes());
  float* scores = reinterpret_cast<float*>(smem + S::q_bytes() + S::rows_bytes(part_tokens));
  unsigned char* ring = reinterpret_cast<unsigned char*>(scores) + S::score_bytes(part_tokens);
  float* merge = scores;  // once the scores and the ring are used

  // The block table and the queries are read together with the context length, none of these
  // loads waiting on another: the pool row (block * block_size + offset) of every token of the
  // partition up to the table's end (those past the context are never used), so that no load
  // below waits on the block table; the queries in fp32, heads past g_count as zeros (their
  // results are dropped).
  const std::int32_t* table = block_tables + static_cast<std::size_t>(row) * max_blocks;
  const int span = min(part_tokens, max_tokens - start);
#pragma unroll 4
  for (int t = tid; t < span; t += kAttnThreads) {
    const int token = start + t;
    rows_s[t] = static_cast<unsigned>(table[token / block_size]) * block_size + token % block_size;
  }
  for (int i = tid; i < GC * S::kChunks; i += kAttnThreads) {
    const int g = i / S::kChunks, c = i % S::kChunks;
    float* dst = q_s + g * D + c * S::kVec;
    if (g < g_count) {
      const KV v = load_vec<S::kVec>(q + (static_cast<std::size_t>(row) * heads + h0 + g) * D + c * S::kVec);
#pragma unroll
      for (int e = 0; e < S::kVec; ++e) dst[e] = to_float(v.v[e]);
    } else {
#pragma unroll
      for (int e = 0; e < S::kVec; ++e) dst[e] = 0.f;
    }
  }
  const int ctx = min(stored_len, max_tokens);
  if (start >= ctx) {
    // Nothing to attend to. Only an empty context (against the contract) gets here with the
    // first partition: the reference's softmax over no key gives NaN.
    if (part == 0)
      for (int i = tid; i < g_count * D; i += kAttnThreads)
        out[(static_cast<std::size_t>(row) * heads + h0 + i / D) * D + i % D] = from_float<T>(NAN);
    return;
  }
  const int n = min(part_tokens, ctx - start);               // tokens of this partition
  const int active = (ctx + part_tokens - 1) / part_tokens;  // the row's active partitions
  __syncthreads();

  // Items 0 .. tiles-1 are key tiles, tiles .. 2 tiles-1 value tiles; item i sits in buffer
  // i % kAttnStages. Every thread commits one group per item, empty or not, so that
  // __pipeline_wait_prior counts alike everywhere.
  const int tiles = (n + S::kTileTokens - 1) / S::kTileTokens;
  const int items = 2 * tiles;
  auto issue = [&](int item) {
    if (item < items) {
      const bool is_key = item < tiles;
      const T* pool = is_key ? k_pool : v_pool;
      const int t0 = (is_key ? item : item - tiles) * S::kTileTokens;
      unsigned char* dst = ring + (item % kAttnStages) * S::kTileBytes;
      for (int i = tid; i < S::kTileTokens * S::kChunks; i += kAttnThreads) {
        const int tt = i / S::kChunks, c = i % S::kChunks;
        if (t0 + tt < n) {
          const T* src = pool + (static_cast<std::size_t>(rows_s[t0 + tt]) * kv_heads + kvh) * D + c * S::kVec;
          __pipeline_memcpy_async(dst + tt * S::kPaddedRow + c * 16, src, 16);
        }
      }
    }
    __pipeline_commit();
  };
#pragma unroll
  for (int i = 0; i < kAttnStages - 1; ++i) issue(i);

  const int my_token = tid / S::kTpt, my_part = tid % S::kTpt;
  const int stream = tid / S::kTpv, d0 = (tid % S::kTpv) * S::kDpt;
  float acc[GC][S::kDpt];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
#pragma unroll
    for (int e = 0; e < S::kDpt; ++e) acc[g][e] = 0.f;
  }
  float p[GC];

  for (int item = 0; item < items; ++item) {
    issue(item + kAttnStages - 1);  // into the buffer freed by the __syncthreads ending the last round
    __pipeline_wait_prior(kAttnStages - 1);
    __syncthreads();  // item's tile is visible to all
    const unsigned char* buf = ring + (item % kAttnStages) * S::kTileBytes;
    if (item < tiles) {
      // ---- 1. q . k
      const int t = item * S::kTileTokens + my_token;
      float dot[GC];
#pragma unroll
      for (int g = 0; g < GC; ++g) dot[g] = 0.f;
      if (t < n) {
        const unsigned char* krow = buf + my_token * S::kPaddedRow;
#pragma unroll
        for (int it = 0; it < S::kChunks / S::kTpt; ++it) {
          const int c = it * S::kTpt + my_part;
          const KV kv = *reinterpret_cast<const KV*>(krow + c * 16);
          float k[S::kVec];
#pragma unroll
          for (int e = 0; e < S::kVec; ++e) k[e] = to_float(kv.v[e]);
#pragma unroll
          for (int g = 0; g < GC; ++g) {
            const float4* qv = reinterpret_cast<const float4*>(q_s + g * D + c * S::kVec);
#pragma unroll
            for (int e = 0; e < S::kVec / 4; ++e) {
              const float4 a = qv[e];
              dot[g] = fmaf(a.x, k[4 * e], dot[g]);
              dot[g] = fmaf(a.y, k[4 * e + 1], dot[g]);
              dot[g] = fmaf(a.z, k[4 * e + 2], dot[g]);
              dot[g] = fmaf(a.w, k[4 * e + 3], dot[g]);
            }
          }
        }
      }
      // A token's kTpt threads are adjacent lanes.
#pragma unroll
      for (int o = S::kTpt / 2; o > 0; o >>= 1) {
#pragma unroll
        for (int g = 0; g < GC; ++g) dot[g] += __shfl_xor_sync(kFullMask, dot[g], o);
      }
      if (t < n && my_part == 0) {
#pragma unroll
        for (int g = 0; g < GC; ++g) dot[g] *= scale;  // torch: (q k^T) * scale
        store_row<GC>(scores, t, dot);
      }
      if (item == tiles - 1) {
        // ---- 2. softmax over the partition (per head: max, exp(s - max), sum)
        __syncthreads();  // all scores written
        float mx[GC], sum[GC];
#pragma unroll
        for (int g = 0; g < GC; ++g) {
          mx[g] = -INFINITY;
          sum[g] = 0.f;
        }
        for (int s = tid; s < n; s += kAttnThreads) {
          load_row<GC>(scores, s, p);
#pragma unroll
          for (int g = 0; g < GC; ++g) mx[g] = fmaxf(mx[g], p[g]);
        }
        block_reduce<GC, true>(mx, scratch);
        for (int s = tid; s < n; s += kAttnThreads) {
          load_row<GC>(scores, s, p);
#pragma unroll
          for (int g = 0; g < GC; ++g) {
            p[g] = expf(p[g] - mx[g]);
            sum[g] += p[g];
          }
          store_row<GC>(scores, s, p);
        }
        block_reduce<GC, false>(sum, scratch);  // its __syncthreads also publish the probabilities
        if (tid == 0) {
#pragma unroll
          for (int g = 0; g < GC; ++g) {
            head_max[g] = mx[g];
            head_sum[g] = sum[g];
          }
        }
      }
    } else {
      // ---- 3. p . v over this value tile
      const int t0 = (item - tiles) * S::kTileTokens;
      const int count = min(S::kTileTokens, n - t0);
#pragma unroll 4
      for (int tt = stream; tt < count; tt += S::kStreams) {
        const VV v = *reinterpret_cast<const VV*>(buf + tt * S::kPaddedRow + d0 * static_cast<int>(sizeof(T)));
        load_row<GC>(scores, t0 + tt, p);
#pragma unroll
        for (int e = 0; e < S::kDpt; ++e) {
          const float x = to_float(v.v[e]);
#pragma unroll
          for (int g = 0; g < GC; ++g) acc[g][e] = fmaf(p[g], x, acc[g][e]);
        }
      }
    }
    __syncthreads();  // this buffer may be refilled; after the last item, scores and ring are free
  }

  // The streams' accumulators, summed in stream order, four dims a thread.
#pragma unroll
  for (int g = 0; g < GC; ++g) {
#pragma unroll
    for (int e = 0; e < S::kDpt; e += 4)
      *reinterpret_cast<float4*>(merge + (stream * GC + g) * D + d0 + e) =
          make_float4(acc[g][e], acc[g][e + 1], acc[g][e + 2], acc[g][e + 3]);
  }
  __syncthreads();
  for (int i = tid; i < GC * (D / 4); i += kAttnThreads) {
    const int g = i / (D / 4), d = (i % (D / 4)) * 4;
    if (g >= g_count) continue;
    float4 s = *reinterpret_cast<const float4*>(merge + g * D + d);
    for (int st = 1; st < S::kStreams; ++st) {
      const float4 x = *reinterpret_cast<const float4*>(merge + (st * GC + g) * D + d);
      s.x += x.x;
      s.y += x.y;
      s.z += x.z;
      s.w += x.w;
    }
    const std::size_t head = static_cast<std::size_t>(row) * heads + h0 + g;
    if (active == 1) {
      const float l = head_sum[g];
      Vec<T, 4> o;
      o.v[0] = from_float<T>(s.x / l);
      o.v[1] = from_float<T>(s.y / l);
      o.v[2] = from_float<T>(s.z / l);
      o.v[3] = from_float<T>(s.w / l);
      store_vec<4>(out + head * D + d, o);
    } else {
      const std::size_t slot = head * num_parts + part;
      *reinterpret_cast<float4*>(ws_acc + slot * D + d) = s;
      if (d == 0) {
        ws_ml[2 * slot] = head_max[g];
        ws_ml[2 * slot + 1] = head_sum[g];
      }
    }
  }
  if (active == 1) return;

  // ---- 4. The last active partition to finish merges them all.
  __threadfence();  // this thread's partial is visible to the whole device before the count
  __syncthreads();
  if (tid == 0) {
    std::int32_t* counter = counters + (static_cast<std::size_t>(row) * gridDim.y + blockIdx.y);
    const bool last = atomicAdd(counter, 1) == active - 1;
    if (last) {
      *counter = 0;     // every active partition has counted: nobody touches it again this call
      __threadfence();  // the others' partials are read after their counts
    }
    merges = last;
  }
  __syncthreads();
  if (!merges) return;
  // Out of L2 (__ldcg): another multiprocessor wrote them. The same operations in the same order
  // as the reference merge: m over the partitions, then l and acc over them in order.
  for (int i = tid; i < g_count * (D / 4); i += kAttnThreads) {
    const int g = i / (D / 4), d = (i % (D / 4)) * 4;
    const std::size_t first = (static_cast<std::size_t>(row) * heads + h0 + g) * num_parts;  // slot of partition 0
    const float2* ml = reinterpret_cast<const float2*>(ws_ml) + first;  // (max, sum) pairs
    float m = -INFINITY;
#pragma unroll 4
    for (int p = 0; p < active; ++p) m = fmaxf(m, __ldcg(ml + p).x);
    float l = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int p = 0; p < active; ++p) {
      const float2 ml_p = __ldcg(ml + p);
      const float4 x = __ldcg(reinterpret_cast<const float4*>(ws_acc + (first + p) * D + d));
      const float w = expf(ml_p.x - m);
      l += ml_p.y * w;
      acc.x += w * x.x;
      acc.y += w * x.y;
      acc.z += w * x.z;
      acc.w += w * x.w;
    }
    Vec<T, 4> o;
    o.v[0] = from_float<T>(acc.x / l);
    o.v[1] = from_float<T>(acc.y / l);
    o.v[2] = from_float<T>(acc.z / l);
    o.v[3] = from_float<T>(acc.w / l);
    store_vec<4>(out + (static_cast<std::size_t>(row) * heads + h0 + g) * D + d, o);
  }
}

struct AttnArgs {
  const void* q;
  const void* k_pool;
  const void* v_pool;
  const std::int32_t* block_tables;
  const std::int32_t* context_lens;
  void* out;
  void* workspace;
  std::int32_t* counters;
  int rows, heads, kv_heads, head_chunks, block_size, max_blocks;
  AttnSplit split;
  float scale;
};

template <typename T, int D, int GC>
void launch_attention(const AttnArgs& a, cudaStream_t stream) {
  using S = AttnShape<T, D, GC>;
  const std::size_t smem = S::smem_bytes(a.split.part_tokens);
  auto kernel = paged_attention_kernel<T, D, GC>;
  // Above 48 KB (static shared memory included) a kernel must opt in; the static part is small.
  if (smem > 32 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("decode kernels: paged_attention needs ") + std::to_string(smem) +
                               " bytes of shared memory: " + cudaGetErrorString(e));
  }
  const std::size_t slots =
      static_cast<std::size_t>(a.rows) * a.heads * static_cast<std::size_t>(a.split.num_parts);
  float* ws_acc = a.split.num_parts > 1 ? static_cast<float*>(a.workspace) : nullptr;
  float* ws_ml = a.split.num_parts > 1 ? ws_acc + slots * D : nullptr;
  std::int32_t* counters = a.split.num_parts > 1 ? a.counters : nullptr;
  const dim3 grid(a.split.num_parts, a.kv_heads * a.head_chunks, a.rows);
  launch("paged_attention", kernel, grid, dim3(kAttnThreads), smem, stream, static_cast<const T*>(a.q),
         static_cast<const T*>(a.k_pool), static_cast<const T*>(a.v_pool), a.block_tables, a.context_lens,
         static_cast<T*>(a.out), ws_acc, ws_ml, counters, a.heads, a.kv_heads, a.head_chunks, a.block_size,
         a.max_blocks, a.split.part_tokens, a.split.num_parts, a.scale);
}

template <typename T, int D>
void launch_attention_dim(const AttnArgs& a, int group_chunk, cudaStream_t stream) {
  switch (group_chunk) {
    case 1: launch_attention<T, D, 1>(a, stream); return;
    case 2: launch_attention<T, D, 2>(a, stream); return;
    case 4: launch_attention<T, D, 4>(a, stream); return;
    case 6: launch_attention<T, D, 6>(a, stream); return;
    case 8: launch_attention<T, D, 8>(a, stream); return;
    default: launch_attention<T, D, 16>(a, stream); return;
  }
}

// =============================================================================================
// silu_mul: elementwise over [rows, inter], one vector a thread (grid-stride beyond 2^20 blocks).

constexpr int kSiluThreads = 256;

template <typename T, int VEC>
__global__ void __launch_bounds__(kSiluThreads)
    silu_mul_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int inter, std::int64_t total) {
  using V = Vec<T, VEC>;
  const int per_row = inter / VEC;
  wait_for_producers();
  allow_dependents();
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kSiluThreads + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * kSiluThreads) {
    const std::int64_t r = i / per_row;
    const int c = static_cast<int>(i - r * per_row) * VEC;
    const T* src = gate_up + r * 2 * inter + c;
    const V g = load_vec<VEC>(src), u = load_vec<VEC>(src + inter);
    V o;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      // torch: silu in fp32 as x / (1 + exp(-x)), cast to the dtype; times up, rounded.
      const float x = to_float(g.v[e]);
      o.v[e] = from_float<T>(round_to<T>(x / (1.0f + expf(-x))) * to_float(u.v[e]));
    }
    store_vec<VEC>(out + r * inter + c, o);
  }
}

template <typename T, int VEC>
void launch_silu_mul(const void* gate_up, void* out, int rows, int inter, cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(rows) * (inter / VEC);
  const std::int64_t blocks = std::min<std::int64_t>((total + kSiluThreads - 1) / kSiluThreads, 1 << 20);
  launch("silu_mul", silu_mul_kernel<T, VEC>, dim3(static_cast<unsigned>(blocks)), dim3(kSiluThreads), 0, stream,
         static_cast<const T*>(gate_up), static_cast<T*>(out), inter, total);
}

// =============================================================================================
// sample_rows: one block of 1024 threads per row.
//
//   A. Coalesced pass: x = float(logit) (* 1 / temperature), the max with its first index, and
//      sum exp(x - max) (online: a thread rescales its partial sum when its max grows).
//      lse = log(sum), lp_i = (x_i - max) - lse as torch's log_softmax. Greedy ends here.
//   B. Each thread owns a contiguous chunk of the vocabulary and sums p_i = exp(lp_i) over it in
//      float64, in vocabulary order; a block-wide exclusive scan gives each chunk's prefix P.
//      The cdf of token i of chunk t is P_t + (running chunk sum up to i), one rounding. Within
//      a chunk it never decreases, so the chunk holding the first token with cdf > u * total
//      (or cdf >= total) is the first chunk whose last cdf passes: that thread walks its chunk
//      again, with the same additions in the same order, and finds the token.
//
// Both passes evaluate expf per element (the reference's exact p_i), which bounds the kernel by
// arithmetic rather than memory: one block per row keeps the draw simple, at some latency for
// small batches.

constexpr int kSampleThreads = 1024;

// Merges (max, sum of exp(x - max), first index of the max) of two parts.
__device__ __forceinline__ void merge_stats(float& m, float& s, int& arg, float om, float os, int oarg) {
  if (om > m || (om == m && oarg < arg)) arg = oarg;
  const float top = fmaxf(m, om);
  if (top != -INFINITY) s = __fadd_rn(__fmul_rn(s, expf(m - top)), __fmul_rn(os, expf(om - top)));
  m = top;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kSampleThreads)
    sample_rows_kernel(const T* __restrict__ logits, int vocab, int greedy, float inv_temperature,
                       const double* __restrict__ uniforms, std::int64_t* __restrict__ tokens,
                       float* __restrict__ logprobs) {
  using V = Vec<T, VEC>;
  __shared__ float warp_m[32], warp_s[32];
  __shared__ int warp_arg[32];
  __shared__ double warp_prefix[32];
  __shared__ double row_total;
  __shared__ int first_chunk;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row = blockIdx.x;
  const T* x_row = logits + static_cast<std::size_t>(row) * vocab;
  wait_for_producers();
  allow_dependents();
  // torch on CUDA divides by a scalar as x * (1 / scalar), in fp32.
  auto scaled = [&](T l) { return greedy ? to_float(l) : __fmul_rn(to_float(l), inv_temperature); };

  // ---- A. max, first argmax, sum of exp(x - max)
  float m = -INFINITY, s = 0.f;
  int arg = INT_MAX;
  const int vectors = vocab / VEC;
#pragma unroll 4
  for (int v = tid; v < vectors; v += kSampleThreads) {
    const V val = load_vec<VEC>(x_row + static_cast<std::size_t>(v) * VEC);
    float x[VEC];
    float vm = -INFINITY;
    int varg = INT_MAX;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      x[e] = scaled(val.v[e]);
      if (x[e] > vm) {
        vm = x[e];
        varg = v * VEC + e;
      }
    }
    if (vm > m) {  // a new max (this thread's indices only grow: the first stays on ties)
      s = __fmul_rn(s, expf(m - vm));
      m = vm;
      arg = varg;
    }
    if (m != -INFINITY) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) s += expf(__fsub_rn(x[e], m));
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(kFullMask, m, o), os = __shfl_xor_sync(kFullMask, s, o);
    const int oarg = __shfl_xor_sync(kFullMask, arg, o);
    merge_stats(m, s, arg, om, os, oarg);
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
    warp_arg[warp] = arg;
  }
  if (tid == 0) first_chunk = kSampleThreads;
  __syncthreads();
  if (warp == 0) {
    m = warp_m[lane];
    s = warp_s[lane];
    arg = warp_arg[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_xor_sync(kFullMask, m, o), os = __shfl_xor_sync(kFullMask, s, o);
      const int oarg = __shfl_xor_sync(kFullMask, arg, o);
      merge_stats(m, s, arg, om, os, oarg);
    }
    if (lane == 0) {
      warp_m[0] = m;
      warp_s[0] = s;
      warp_arg[0] = arg;
    }
  }
  __syncthreads();
  m = warp_m[0];
  const float lse = logf(warp_s[0]);
  // lp = (x - max) - log(sum), as torch's log_softmax.
  auto logprob = [&](T l) { return __fsub_rn(__fsub_rn(scaled(l), m), lse); };

  if (greedy) {
    if (tid == 0) {
      const int token = warp_arg[0] == INT_MAX ? 0 : warp_arg[0];  // no index: every logit -inf or NaN
      tokens[row] = token;
      logprobs[row] = logprob(x_row[token]);
    }
    return;
  }

  // ---- B. float64 cdf by chunks
  const int chunk = ((vocab + kSampleThreads - 1) / kSampleThreads + VEC - 1) / VEC * VEC;
  const int begin = min(vocab, tid * chunk), end = min(vocab, begin + chunk);
  double c = 0.0;
#pragma unroll 4
  for (int i = begin; i < end; i += VEC) {
    const V val = load_vec<VEC>(x_row + i);
#pragma unroll
    for (int e = 0; e < VEC; ++e) c += static_cast<double>(expf(logprob(val.v[e])));
  }
  // Exclusive scan of the chunk sums: within the warp, then over the warps.
  double incl = c;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  double excl = __shfl_up_sync(kFullMask, incl, 1);
  if (lane == 0) excl = 0.0;
  if (lane == 31) warp_prefix[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    double w = warp_prefix[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(kFullMask, w, o);
      if (lane >= o) w += y;
    }
    double w_excl = __shfl_up_sync(kFullMask, w, 1);
    if (lane == 0) w_excl = 0.0;
    warp_prefix[lane] = w_excl;  // each lane rewrites only the entry it read
  }
  __syncthreads();
  const double prefix = warp_prefix[warp] + excl;
  // The total is the cdf of the last token, as the walk below would compute it.
  if (tid == (vocab - 1) / chunk) row_total = prefix + c;
  __syncthreads();
  const double total = row_total;
  const double target = uniforms[row] * total;
  if (begin < end) {
    const double last = prefix + c;
    if (last > target || last >= total) atomicMin(&first_chunk, tid);
  }
  __syncthreads();
  const int first = first_chunk;
  if (first == kSampleThreads && tid == 0) {  // no chunk passed: a NaN total; torch counts 0
    tokens[row] = 0;
    logprobs[row] = logprob(x_row[0]);
  }
  if (tid == first) {  // its chunk was just read: mostly in L1
    double run = 0.0;
    int token = end - 1;
    bool found = false;
    for (int i = begin; i < end && !found; i += VEC) {
      const V val = load_vec<VEC>(x_row + i);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        if (!found) {
          run += static_cast<double>(expf(logprob(val.v[e])));
          const double cdf = prefix + run;
          if (cdf > target || cdf >= total) {
            token = i + e;
            found = true;
          }
        }
      }
    }
    tokens[row] = token;
    logprobs[row] = logprob(x_row[token]);
  }
}

}  // namespace

// =============================================================================================
// Entry points

void add_rms_norm(Dtype dtype, void* residual, const void* delta, const void* weight, void* out, int rows, int hidden,
                  float eps, cudaStream_t stream) {
  require(rows >= 0 && hidden > 0, "add_rms_norm", "rows >= 0 and hidden > 0 needed, got rows " +
                                                       std::to_string(rows) + ", hidden " + std::to_string(hidden));
  if (rows == 0) return;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    if (hidden % kVec == 0 && aligned16(residual) && aligned16(delta) && aligned16(weight) && aligned16(out))
      launch_add_rms_norm<T, kVec>(residual, delta, weight, out, rows, hidden, eps, stream);
    else
      launch_add_rms_norm<T, 1>(residual, delta, weight, out, rows, hidden, eps, stream);
  });
}

void rope_write_kv(Dtype dtype, const void* qkv, const std::int64_t* positions, const float* inv_freq,
                   const void* q_norm, const void* k_norm, float eps, void* q_out, void* k_pool, void* v_pool,
                   const std::int64_t* slots, int rows, int heads, int kv_heads, int head_dim, cudaStream_t stream) {
  require(head_dim > 0 && head_dim % 2 == 0 && head_dim <= 8192, "rope_write_kv",
          "head_dim must be even, in 2..8192, got " + std::to_string(head_dim));
  require(rows >= 0 && heads > 0 && kv_heads > 0, "rope_write_kv",
          "rows >= 0, heads > 0 and kv_heads > 0 needed, got " + std::to_string(rows) + ", " + std::to_string(heads) +
              ", " + std::to_string(kv_heads));
  if (rows == 0) return;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    if ((head_dim / 2) % kVec == 0 && aligned16(qkv) && aligned16(q_norm) && aligned16(k_norm) && aligned16(q_out) &&
        aligned16(k_pool) && aligned16(v_pool))
      launch_rope_write_kv<T, kVec>(qkv, positions, inv_freq, q_norm, k_norm, eps, q_out, k_pool, v_pool, slots, rows,
                                    heads, kv_heads, head_dim, stream);
    else
      launch_rope_write_kv<T, 1>(qkv, positions, inv_freq, q_norm, k_norm, eps, q_out, k_pool, v_pool, slots, rows,
                                 heads, kv_heads, head_dim, stream);
  });
}

std::size_t paged_attention_workspace_bytes(int rows, int heads, int kv_heads, int head_dim, int max_blocks,
                                            int block_size) {
  if (rows <= 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || head_dim <= 0 || max_blocks <= 0 ||
      block_size <= 0)
    return 0;
  const AttnSplit split = attention_split(rows, heads, kv_heads, max_blocks * block_size);
  if (split.num_parts <= 1) return 0;
  // [rows, heads, parts, head_dim] partial outputs, then [rows, heads, parts] (max, sum) pairs.
  return static_cast<std::size_t>(rows) * heads * split.num_parts * (head_dim + 2) * sizeof(float);
}

std::size_t paged_attention_counters(int rows, int heads, int kv_heads) {
  if (rows <= 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) return 0;
  return static_cast<std::size_t>(rows) * kv_heads * attention_head_chunks(heads, kv_heads);
}

void paged_attention(Dtype dtype, const void* q, const void* k_pool, const void* v_pool,
                     const std::int32_t* block_tables, const std::int32_t* context_lens, void* out, int rows,
                     int heads, int kv_heads, int head_dim, int block_size, int max_blocks, float scale,
                     void* workspace, std::int32_t* counters, cudaStream_t stream) {
  const char* fn = "paged_attention";
  require(head_dim == 64 || head_dim == 128 || head_dim == 256, fn,
          "head_dim must be 64, 128 or 256, got " + std::to_string(head_dim));
  require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, fn,
          "heads must be a positive multiple of kv_heads, got " + std::to_string(heads) + " and " +
              std::to_string(kv_heads));
  require(rows >= 0 && block_size > 0 && max_blocks > 0, fn,
          "rows >= 0, block_size > 0 and max_blocks > 0 needed, got " + std::to_string(rows) + ", " +
              std::to_string(block_size) + ", " + std::to_string(max_blocks));
  require(static_cast<std::int64_t>(max_blocks) * block_size <= (1 << 30), fn, "max_blocks * block_size too large");
  require(rows <= 65535, fn, "at most 65535 rows, got " + std::to_string(rows));
  require(aligned16(q) && aligned16(k_pool) && aligned16(v_pool) && aligned16(out), fn,
          "q, the pools and out must be 16-byte aligned");
  if (rows == 0) return;
  const int group_chunk = attention_group_chunk(heads / kv_heads);
  AttnArgs a{q,
             k_pool,
             v_pool,
             block_tables,
             context_lens,
             out,
             workspace,
             counters,
             rows,
             heads,
             kv_heads,
             attention_head_chunks(heads, kv_heads),
             block_size,
             max_blocks,
             attention_split(rows, heads, kv_heads, max_blocks * block_size),
             scale};
  require(a.kv_heads * a.head_chunks <= 65535, fn, "too many kv heads");
  if (a.split.num_parts > 1) {
    require(workspace != nullptr && aligned16(workspace), fn,
            "a 16-byte aligned workspace of paged_attention_workspace_bytes() bytes is needed");
    require(counters != nullptr, fn, "paged_attention_counters() zeroed int32 counters are needed");
  }
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (head_dim) {
      case 64: launch_attention_dim<T, 64>(a, group_chunk, stream); return;
      case 128: launch_attention_dim<T, 128>(a, group_chunk, stream); return;
      default: launch_attention_dim<T, 256>(a, group_chunk, stream); return;
    }
  });
}

void silu_mul(Dtype dtype, const void* gate_up, void* out, int rows, int inter, cudaStream_t stream) {
  require(rows >= 0 && inter > 0, "silu_mul",
          "rows >= 0 and inter > 0 needed, got " + std::to_string(rows) + ", " + std::to_string(inter));
  if (rows == 0) return;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    if (inter % kVec == 0 && aligned16(gate_up) && aligned16(out))
      launch_silu_mul<T, kVec>(gate_up, out, rows, inter, stream);
    else
      launch_silu_mul<T, 1>(gate_up, out, rows, inter, stream);
  });
}

void sample_rows(Dtype dtype, const void* logits, int rows, int vocab, float temperature, const double* uniforms,
                 std::int64_t* tokens, float* logprobs, cudaStream_t stream) {
  require(rows >= 0 && vocab > 0, "sample_rows",
          "rows >= 0 and vocab > 0 needed, got " + std::to_string(rows) + ", " + std::to_string(vocab));
  require(temperature >= 0.f && std::isfinite(temperature), "sample_rows",
          "temperature must be finite and >= 0, got " + std::to_string(temperature));
  if (rows == 0) return;
  const int greedy = temperature == 0.f ? 1 : 0;
  const float inv_temperature = greedy ? 0.f : 1.0f / temperature;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    auto kernel = vocab % kVec == 0 && aligned16(logits) ? sample_rows_kernel<T, kVec> : sample_rows_kernel<T, 1>;
    launch("sample_rows", kernel, dim3(rows), dim3(kSampleThreads), 0, stream, static_cast<const T*>(logits), vocab,
           greedy, inv_temperature, uniforms, tokens, logprobs);
  });
}

}  // namespace kbrl::model::cuda
