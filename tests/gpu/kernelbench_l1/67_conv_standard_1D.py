# kbrl GPU test candidate for KernelBench level1/67_conv_standard_1D: nn.Conv1d (any stride, padding,
# dilation, groups, optional bias) as an implicit GEMM: per image and group, the weights (C_out/g x
# C_in/g*k) times the im2col matrix of the input, whose tiles are gathered straight from x into
# shared memory (never materialized). fp32 FMA accumulation (no TF32). 128 x 128 output tiles, 8 x 8
# values per thread, two shared-memory stages.
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>
#include <limits>

constexpr int kBM = 128;  // rows of C per block
constexpr int kBN = 128;  // columns of C per block
constexpr int kBK = 8;    // depth of one shared-memory stage
constexpr int kThreads = 256;
constexpr int kPad = 4;   // keeps rows 16-byte aligned and spreads the transposed stores over banks

// The convolution as a GEMM per (image, group): out (C_out/g x L_out) = W_g (C_out/g x K) times
// im2col(x) (K x L_out), K = C_in/g * kernel_size, the im2col matrix never materialized.
struct Conv1dArgs {
  const float* x;     // N x C_in x L
  const float* w;     // C_out x C_in/g x ks, i.e. each output channel's K weights contiguous
  const float* bias;  // C_out or nullptr
  float* out;         // N x C_out x L_out
  int groups, cin_g, cout_g, ks, K;
  int64_t L, L_out;
  int stride, pad, dil;
};

// Stages a 128 x 8 tile whose 8 values per row are contiguous in memory (row-major M x K for A,
// N x K for B^T): each thread reads one float4 (or 4 scalars) of one row.
template <bool kVec>
__device__ __forceinline__ void load_k_contiguous(const float* __restrict__ src, int64_t ld, int rows, int K,
                                                  int row0, int k0, float (&v)[4]) {
  const int r = threadIdx.x >> 1;
  const int kq = (threadIdx.x & 1) * 4;
  const int gr = row0 + r;
  const int gk = k0 + kq;
  if (kVec) {  // K % 4 == 0: the four values are all inside or all outside
    if (gr < rows && gk < K) {
      const float4 q = *reinterpret_cast<const float4*>(src + static_cast<int64_t>(gr) * ld + gk);
      v[0] = q.x;
      v[1] = q.y;
      v[2] = q.z;
      v[3] = q.w;
    } else {
      v[0] = v[1] = v[2] = v[3] = 0.f;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      v[j] = (gr < rows && gk + j < K) ? src[static_cast<int64_t>(gr) * ld + gk + j] : 0.f;
  }
}

__device__ __forceinline__ void store_k_contiguous(float (*s)[kBM + kPad], const float (&v)[4]) {
  const int r = threadIdx.x >> 1;
  const int kq = (threadIdx.x & 1) * 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) s[kq + j][r] = v[j];
}

// Stages the 8 x 128 tile of im2col(x) at (k0, col0): row r of K is input channel r / ks at
// tap r % ks; column l reads x at l * stride - pad + tap * dil, zero outside [0, L).
__device__ __forceinline__ void load_im2col(const float* __restrict__ x, const Conv1dArgs& p, int col0, int k0,
                                            float (&v)[4]) {
  const int k = threadIdx.x >> 5;
  const int c = (threadIdx.x & 31) * 4;
  const int gk = k0 + k;
  if (gk >= p.K) {
    v[0] = v[1] = v[2] = v[3] = 0.f;
    return;
  }
  const int ci = gk / p.ks;
  const int tap = gk - ci * p.ks;
  const float* row = x + static_cast<int64_t>(ci) * p.L;
  const int64_t shift = static_cast<int64_t>(tap) * p.dil - p.pad;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t l = static_cast<int64_t>(col0) + c + j;
    const int64_t pos = l * p.stride + shift;
    v[j] = (l < p.L_out && pos >= 0 && pos < p.L) ? __ldg(row + pos) : 0.f;
  }
}

__device__ __forceinline__ void store_mn_contiguous(float (*s)[kBM + kPad], const float (&v)[4]) {
  const int k = threadIdx.x >> 5;
  const int c = (threadIdx.x & 31) * 4;
  *reinterpret_cast<float4*>(&s[k][c]) = make_float4(v[0], v[1], v[2], v[3]);
}

// 256 threads, each owning an 8 x 8 block of the output as 2 x 2 groups of 4 x 4 (channels ty*4
// and 64 + ty*4, positions tx*4 and 64 + tx*4), so that a quarter warp reads 128 contiguous bytes
// of shared memory. Two shared-memory stages: the next tile's global loads are in flight while
// the current one is multiplied. fp32 FMA throughout, in k order. blockIdx.z = image * groups + g.
template <bool kVecW>
__global__ void __launch_bounds__(kThreads) conv1d_gemm_kernel(Conv1dArgs p) {
  __shared__ __align__(16) float As[2][kBK][kBM + kPad];
  __shared__ __align__(16) float Bs[2][kBK][kBN + kPad];
  const int64_t n = blockIdx.z / p.groups;
  const int g = blockIdx.z % p.groups;
  const float* __restrict__ W = p.w + static_cast<int64_t>(g) * p.cout_g * p.K;
  const float* __restrict__ X = p.x + (n * p.groups + g) * p.cin_g * p.L;
  float* __restrict__ Y = p.out + (n * p.groups + g) * p.cout_g * p.L_out;
  const int row0 = blockIdx.y * kBM;  // output channel within the group
  const int col0 = blockIdx.x * kBN;  // output position
  const int tx = threadIdx.x & 15;
  const int ty = threadIdx.x >> 4;

  float va[4], vb[4];
  auto load = [&](int k0) {
    load_k_contiguous<kVecW>(W, p.K, p.cout_g, p.K, row0, k0, va);
    load_im2col(X, p, col0, k0, vb);
  };
  auto store = [&](int stage) {
    store_k_contiguous(As[stage], va);
    store_mn_contiguous(Bs[stage], vb);
  };

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  const int tiles = (p.K + kBK - 1) / kBK;
  load(0);
  store(0);
  __syncthreads();
  for (int t = 0; t < tiles; ++t) {
    const int cur = t & 1;
    if (t + 1 < tiles) load((t + 1) * kBK);
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The other stage was last read before the previous barrier, so it can be refilled now.
    if (t + 1 < tiles) store(cur ^ 1);
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
    if (r >= p.cout_g) continue;
    const float bias = p.bias != nullptr ? p.bias[g * p.cout_g + r] : 0.f;
    float* yrow = Y + static_cast<int64_t>(r) * p.L_out;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t c = static_cast<int64_t>(col0) + h * 64 + tx * 4 + j;
        if (c < p.L_out) yrow[c] = p.bias != nullptr ? acc[i][h * 4 + j] + bias : acc[i][h * 4 + j];
      }
    }
  }
}

torch::Tensor conv1d_forward(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, int64_t stride,
                             int64_t padding, int64_t dilation, int64_t groups) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "conv1d: expected CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat, "conv1d: expected float32");
  TORCH_CHECK(x.dim() == 3 && weight.dim() == 3, "conv1d: expected x (N, C_in, L) and weight (C_out, C_in/g, k), got ",
              x.sizes(), " and ", weight.sizes());
  TORCH_CHECK(x.device() == weight.device(), "conv1d: inputs on different devices");
  TORCH_CHECK(stride >= 1 && padding >= 0 && dilation >= 1 && groups >= 1, "conv1d: invalid stride/padding/dilation/groups");
  const int64_t N = x.size(0), cin = x.size(1), L = x.size(2), cout = weight.size(0), ks = weight.size(2);
  TORCH_CHECK(cin % groups == 0 && cout % groups == 0 && weight.size(1) == cin / groups,
              "conv1d: weight ", weight.sizes(), " does not fit input ", x.sizes(), " with groups = ", groups);
  const int64_t span = dilation * (ks - 1) + 1;
  TORCH_CHECK(L + 2 * padding >= span, "conv1d: input of length ", L, " is shorter than the kernel's span");
  const int64_t L_out = (L + 2 * padding - span) / stride + 1;
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  torch::Tensor bc;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->is_cuda() && bias->scalar_type() == at::kFloat && bias->numel() == cout,
                "conv1d: bias must be a float32 CUDA tensor of ", cout, " values");
    bc = bias->contiguous();
  }
  auto out = torch::empty({N, cout, L_out}, xc.options());
  if (out.numel() == 0) return out;
  const int64_t K = (cin / groups) * ks;
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  TORCH_CHECK(K <= kMaxInt && cout <= kMaxInt && L_out <= kMaxInt && L <= kMaxInt && span <= kMaxInt,
              "conv1d: dimensions too large");
  Conv1dArgs p{xc.data_ptr<float>(), wc.data_ptr<float>(), bc.defined() ? bc.data_ptr<float>() : nullptr,
               out.data_ptr<float>(), static_cast<int>(groups), static_cast<int>(cin / groups),
               static_cast<int>(cout / groups), static_cast<int>(ks), static_cast<int>(K), L, L_out,
               static_cast<int>(stride), static_cast<int>(padding), static_cast<int>(dilation)};
  if (K == 0) return out.zero_();
  const int64_t planes = N * groups;
  TORCH_CHECK(planes <= 65535, "conv1d: batch * groups exceeds this kernel's grid");
  const dim3 grid(static_cast<unsigned>((L_out + kBN - 1) / kBN), static_cast<unsigned>((p.cout_g + kBM - 1) / kBM),
                  static_cast<unsigned>(planes));
  const bool vec_w = K % 4 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec_w)
    conv1d_gemm_kernel<true><<<grid, kThreads, 0, stream>>>(p);
  else
    conv1d_gemm_kernel<false><<<grid, kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

cpp_source = (
    "torch::Tensor conv1d_forward(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, "
    "int64_t stride, int64_t padding, int64_t dilation, int64_t groups);"
)

_ext = load_inline(
    name="kbrl_l1_67_conv1d",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["conv1d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1, groups: int = 1, bias: bool = False):
        super().__init__()
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        # nn.Conv1d's parameters, created and initialised in the same order and with the same draws
        # (kaiming_uniform_ with a = sqrt(5), then the bias from the weight's fan-in).
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = (in_channels // groups) * kernel_size
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.conv1d_forward(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
