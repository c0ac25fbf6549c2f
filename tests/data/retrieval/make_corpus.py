#!/usr/bin/env python3
"""Writes the small retrieval corpus the unit tests use (tests/unit/rag_*_test.cpp):

  corpus.jsonl   36 solved examples: a KernelBench-style PyTorch program and a short CUDA or
                 Triton kernel, across elementwise ops, reductions, softmax, norms, matmuls,
                 convolutions, pooling and losses
  queries.jsonl  problems that are not in the corpus, each labeled with the corpus ids a good
                 retriever should return (the same operations, fused or varied)
  leakage.jsonl  problems labeled with the corpus ids that are copies of them (exact, reformatted,
                 renamed, reshaped) and must be excluded; every other id must not be

Every program and kernel here was written for kbrl. Run from anywhere; `--check` verifies the
committed files are exactly this script's output.
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def problem(doc, forward, inputs, consts, init_params="", init_body="pass", init_inputs="", fwd_args="x",
            imports="import torch\nimport torch.nn as nn\n"):
    return f'''{imports}
class Model(nn.Module):
    """
    {doc}
    """
    def __init__(self{init_params}):
        super(Model, self).__init__()
        {init_body}

    def forward(self, {fwd_args}) -> torch.Tensor:
        {forward}

{consts}

def get_inputs():
    {inputs}

def get_init_inputs():
    return [{init_inputs}]
'''


def cuda_elementwise(name, expr):
    return f'''#include <torch/extension.h>

__global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {{
        float v = x[i];
        y[i] = {expr};
    }}
}}

torch::Tensor forward(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    {name}_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
'''


def triton_elementwise(name, expr):
    return f'''import torch
import triton
import triton.language as tl


@triton.jit
def {name}_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, {expr}, mask=mask)


def {name}(x):
    y = torch.empty_like(x)
    n = x.numel()
    {name}_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y
'''


def cuda_row_reduce(name, init, combine, finish):
    return f'''#include <torch/extension.h>

// One block per row; threads stride over the row, then a shared-memory tree combines them.
__global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ out, int cols) {{
    extern __shared__ float partial[];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float acc = {init};
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {{
        float v = row[c];
        acc = {combine};
    }}
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) {{
            float v = partial[threadIdx.x + s];
            acc = partial[threadIdx.x];
            partial[threadIdx.x] = {combine};
        }}
        __syncthreads();
    }}
    if (threadIdx.x == 0) out[blockIdx.x] = {finish};
}}

torch::Tensor forward(torch::Tensor x) {{
    int rows = x.size(0), cols = x.size(1);
    auto out = torch::empty({{rows}}, x.options());
    {name}_kernel<<<rows, 256, 256 * sizeof(float)>>>(x.data_ptr<float>(), out.data_ptr<float>(), cols);
    return out;
}}
'''


def triton_row(name, body):
    return f'''import torch
import triton
import triton.language as tl


@triton.jit
def {name}_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0)
{body}


def {name}(x):
    rows, cols = x.shape
    y = torch.empty_like(x)
    {name}_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
    return y
'''


ELEMENTWISE_CONSTS = "batch_size = 16\ndim = 16384"
ELEMENTWISE_INPUTS = "x = torch.randn(batch_size, dim)\n    return [x]"
REDUCE_CONSTS = "batch_size = 16\ndim1 = 256\ndim2 = 256\nreduce_dim = 1"
REDUCE_INPUTS = "x = torch.randn(batch_size, dim1, dim2)\n    return [x]"
DIM_INIT = dict(init_params=", dim: int", init_body="self.dim = dim", init_inputs="reduce_dim")
MATMUL_CONSTS = "M = 1024\nK = 4096\nN = 2048"
CONV_CONSTS = ("batch_size = 16\nin_channels = 3\nout_channels = 64\nkernel_size = 3\n"
               "height = 256\nwidth = 256")
CONV_INPUTS = "x = torch.randn(batch_size, in_channels, height, width)\n    return [x]"
CONV_INIT = dict(init_params=", in_channels: int, out_channels: int, kernel_size: int",
                 init_inputs="in_channels, out_channels, kernel_size")
POOL_CONSTS = "batch_size = 16\nchannels = 32\nheight = 128\nwidth = 128\nkernel_size = 2\nstride = 2"
POOL_INPUTS = "x = torch.randn(batch_size, channels, height, width)\n    return [x]"
POOL_INIT = dict(init_params=", kernel_size: int, stride: int", init_inputs="kernel_size, stride")
LOSS_CONSTS = "batch_size = 128\ninput_shape = (4096,)"
LOSS_INPUTS = ("return [torch.randn(batch_size, *input_shape), torch.randn(batch_size, *input_shape)]")
LOSS_ARGS = "predictions, targets"


def corpus():
    e = []

    def add(id_, source, kernel, language, speedup):
        e.append({"id": id_, "source": source, "kernel": kernel, "language": language, "speedup": speedup})

    # Elementwise activations.
    add("relu", problem("Applies ReLU to the input.", "return torch.relu(x)", ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS),
        cuda_elementwise("relu", "v > 0.f ? v : 0.f"), "cuda", 1.08)
    add("leaky_relu",
        problem("Applies LeakyReLU with a configurable negative slope.",
                "return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)",
                ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS, init_params=", negative_slope: float = 0.01",
                init_body="self.negative_slope = negative_slope"),
        cuda_elementwise("leaky_relu", "v > 0.f ? v : 0.01f * v"), "cuda", 1.11)
    add("gelu", problem("Applies the GELU activation.", "return torch.nn.functional.gelu(x)", ELEMENTWISE_INPUTS,
                        ELEMENTWISE_CONSTS),
        triton_elementwise("gelu", "0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))"), "triton", 1.02)
    add("sigmoid", problem("Applies Sigmoid to the input.", "return torch.sigmoid(x)", ELEMENTWISE_INPUTS,
                           ELEMENTWISE_CONSTS),
        cuda_elementwise("sigmoid", "1.f / (1.f + __expf(-v))"), "cuda", 1.15)
    add("tanh", problem("Applies Tanh to the input.", "return torch.tanh(x)", ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS),
        triton_elementwise("tanh_act", "2.0 * tl.sigmoid(2.0 * v) - 1.0"), "triton", 0.97)
    add("swish", problem("Swish activation: x times sigmoid of x.", "return x * torch.sigmoid(x)",
                         ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS),
        cuda_elementwise("swish", "v / (1.f + __expf(-v))"), "cuda", 1.63)
    add("elu", problem("Applies ELU with a configurable alpha.", "return F.elu(x, alpha=self.alpha)",
                       ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS, init_params=", alpha: float = 1.0",
                       init_body="self.alpha = alpha", init_inputs="1.0",
                       imports="import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"),
        cuda_elementwise("elu", "v > 0.f ? v : (__expf(v) - 1.f)"), "cuda", 1.04)
    add("hardtanh", problem("Applies HardTanh, clamping values to [-1, 1].",
                            "return F.hardtanh(x, min_val=-1.0, max_val=1.0)", ELEMENTWISE_INPUTS,
                            ELEMENTWISE_CONSTS,
                            imports="import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"),
        triton_elementwise("hardtanh", "tl.minimum(tl.maximum(v, -1.0), 1.0)"), "triton", 1.01)
    add("softplus", problem("Applies Softplus: log(1 + exp(x)).", "return torch.nn.functional.softplus(x)",
                            ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS),
        cuda_elementwise("softplus", "v > 20.f ? v : log1pf(__expf(v))"), "cuda", 1.21)

    # Reductions over one dimension.
    add("sum_dim", problem("Sums the input over one dimension, keeping it.",
                           "return torch.sum(x, dim=self.dim, keepdim=True)", REDUCE_INPUTS, REDUCE_CONSTS,
                           **DIM_INIT),
        cuda_row_reduce("row_sum", "0.f", "acc + v", "acc"), "cuda", 1.32)
    add("mean_dim", problem("Mean of the input over one dimension.", "return torch.mean(x, dim=self.dim)",
                            REDUCE_INPUTS, REDUCE_CONSTS, **DIM_INIT),
        cuda_row_reduce("row_mean", "0.f", "acc + v", "acc / cols"), "cuda", 1.27)
    add("max_dim", problem("Maximum of the input over one dimension.", "return torch.max(x, dim=self.dim)[0]",
                           REDUCE_INPUTS, REDUCE_CONSTS, **DIM_INIT),
        cuda_row_reduce("row_max", "-INFINITY", "fmaxf(acc, v)", "acc"), "cuda", 1.40)
    add("min_dim", problem("Minimum of the input over one dimension.", "return torch.min(x, dim=self.dim)[0]",
                           REDUCE_INPUTS, REDUCE_CONSTS, **DIM_INIT),
        cuda_row_reduce("row_min", "INFINITY", "fminf(acc, v)", "acc"), "cuda", 1.38)
    add("argmax_dim", problem("Index of the maximum over one dimension.", "return torch.argmax(x, dim=self.dim)",
                              REDUCE_INPUTS, REDUCE_CONSTS, **DIM_INIT),
        triton_row("argmax_rows", "    tl.store(y_ptr + row, tl.argmax(tl.where(mask, x, float('-inf')), axis=0))"),
        "triton", 1.19)
    add("cumsum_dim", problem("Cumulative sum (prefix scan) along one dimension.",
                              "return torch.cumsum(x, dim=self.dim)", REDUCE_INPUTS, REDUCE_CONSTS, **DIM_INIT),
        triton_row("cumsum_rows", "    tl.store(y_ptr + row * cols + offs, tl.cumsum(x, axis=0), mask=mask)"),
        "triton", 2.10)

    # Softmax family.
    add("softmax", problem("Softmax over the features of each row.", "return torch.softmax(x, dim=1)",
                           ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS),
        triton_row("softmax_rows", "    x = tl.where(mask, x, float('-inf'))\n    z = tl.exp(x - tl.max(x, axis=0))\n"
                                   "    tl.store(y_ptr + row * cols + offs, z / tl.sum(z, axis=0), mask=mask)"),
        "triton", 1.55)
    add("log_softmax", problem("LogSoftmax over one dimension.", "return torch.log_softmax(x, dim=self.dim)",
                               ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS, init_params=", dim: int = 1",
                               init_body="self.dim = dim"),
        triton_row("log_softmax_rows",
                   "    x = tl.where(mask, x, float('-inf'))\n    s = x - tl.max(x, axis=0)\n"
                   "    tl.store(y_ptr + row * cols + offs, s - tl.log(tl.sum(tl.exp(s), axis=0)), mask=mask)"),
        "triton", 1.48)

    # Normalizations.
    add("layernorm", problem("Layer normalization over the trailing dimensions.", "return self.ln(x)",
                             "x = torch.randn(batch_size, features, dim1, dim2)\n    return [x]",
                             "batch_size = 16\nfeatures = 64\ndim1 = 256\ndim2 = 256",
                             init_params=", normalized_shape: tuple",
                             init_body="self.ln = nn.LayerNorm(normalized_shape=normalized_shape)",
                             init_inputs="(features, dim1, dim2)"),
        triton_row("layer_norm_rows",
                   "    mean = tl.sum(x, axis=0) / cols\n    d = tl.where(mask, x - mean, 0.0)\n"
                   "    var = tl.sum(d * d, axis=0) / cols\n"
                   "    tl.store(y_ptr + row * cols + offs, d / tl.sqrt(var + 1e-5), mask=mask)"),
        "triton", 1.12)
    add("rmsnorm", problem("RMS normalization over the feature dimension.",
                           "rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)\n        return x / rms",
                           "x = torch.randn(batch_size, features, dim1, dim2)\n    return [x]",
                           "batch_size = 16\nfeatures = 64\ndim1 = 256\ndim2 = 256",
                           init_params=", num_features: int, eps: float = 1e-5",
                           init_body="self.num_features = num_features\n        self.eps = eps",
                           init_inputs="features"),
        cuda_row_reduce("rms", "0.f", "acc + v * v", "rsqrtf(acc / cols + 1e-5f)"), "cuda", 1.71)
    add("batchnorm", problem("Batch normalization of a 4D input.", "return self.bn(x)",
                             "x = torch.randn(batch_size, features, dim1, dim2)\n    return [x]",
                             "batch_size = 16\nfeatures = 64\ndim1 = 256\ndim2 = 256",
                             init_params=", num_features: int", init_body="self.bn = nn.BatchNorm2d(num_features=num_features)",
                             init_inputs="features"),
        cuda_row_reduce("channel_stats", "0.f", "acc + v", "acc / cols"), "cuda", 0.92)
    add("l2_normalize", problem("L2 normalization of each row.",
                                "return x / torch.norm(x, p=2, dim=1, keepdim=True)", ELEMENTWISE_INPUTS,
                                ELEMENTWISE_CONSTS),
        cuda_row_reduce("row_l2", "0.f", "acc + v * v", "sqrtf(acc)"), "cuda", 1.66)

    # Matrix multiplications.
    mm_kernel = '''#include <torch/extension.h>
#define TILE 16

__global__ void {name}_kernel(const float* A, const float* B, float* C, int M, int K, int N) {{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {{
        As[threadIdx.y][threadIdx.x] = (row < M && t * TILE + threadIdx.x < K) ? A[{a_index}] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t * TILE + threadIdx.y < K) ? B[(t * TILE + threadIdx.y) * N + col] : 0.f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }}
    if (row < M && col < N) C[row * N + col] = {epilogue};
}}
'''
    add("matmul", problem("Single matrix multiplication C = A * B.", "return torch.matmul(A, B)",
                          "A = torch.randn(M, K)\n    B = torch.randn(K, N)\n    return [A, B]", MATMUL_CONSTS,
                          fwd_args="A: torch.Tensor, B: torch.Tensor"),
        mm_kernel.format(name="matmul", a_index="row * K + t * TILE + threadIdx.x", epilogue="acc"), "cuda", 0.85)
    add("matmul_transposed_a", problem("Matrix multiplication with a transposed first operand.",
                                       "return torch.matmul(A.T, B)",
                                       "A = torch.randn(K, M)\n    B = torch.randn(K, N)\n    return [A, B]",
                                       MATMUL_CONSTS, fwd_args="A: torch.Tensor, B: torch.Tensor"),
        mm_kernel.format(name="matmul_ta", a_index="(t * TILE + threadIdx.x) * M + row", epilogue="acc"), "cuda", 0.91)
    add("bmm", problem("Batched matrix multiplication.", "return torch.bmm(A, B)",
                       "A = torch.randn(batch_size, m, k)\n    B = torch.randn(batch_size, k, n)\n    return [A, B]",
                       "batch_size = 128\nm = 128\nk = 256\nn = 512", fwd_args="A: torch.Tensor, B: torch.Tensor"),
        '''import torch
import triton
import triton.language as tl


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    batch, pid_m, pid_n = tl.program_id(2), tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + batch * M * K + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + batch * K * N + (k0 + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + batch * M * N + rm[:, None] * N + rn[None, :], acc)
''', "triton", 1.05)
    add("linear_relu", problem("Linear layer followed by ReLU.", "return torch.relu(self.linear(x))",
                               "x = torch.randn(batch_size, in_features)\n    return [x]",
                               "batch_size = 128\nin_features = 1024\nout_features = 512",
                               init_params=", in_features: int, out_features: int",
                               init_body="self.linear = nn.Linear(in_features, out_features)",
                               init_inputs="in_features, out_features"),
        mm_kernel.format(name="linear_relu", a_index="row * K + t * TILE + threadIdx.x", epilogue="fmaxf(acc, 0.f)"),
        "cuda", 1.22)
    add("diag_matmul", problem("Multiplies a diagonal matrix built from A with B.", "return torch.diag(A) @ B",
                               "A = torch.randn(N)\n    B = torch.randn(N, M)\n    return [A, B]", "M = 4096\nN = 4096",
                               fwd_args="A: torch.Tensor, B: torch.Tensor"),
        cuda_elementwise("scale_rows", "v"), "cuda", 12.5)

    # Convolutions.
    add("conv2d", problem("Standard 2D convolution.", "return self.conv(x)", CONV_INPUTS, CONV_CONSTS,
                          init_body="self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)",
                          **CONV_INIT),
        '''#include <torch/extension.h>

__global__ void conv2d_kernel(const float* x, const float* w, float* y, int C, int H, int W, int O, int R) {
    int ox = blockIdx.x * blockDim.x + threadIdx.x, oy = blockIdx.y, o = blockIdx.z % O, n = blockIdx.z / O;
    int OH = H - R + 1, OW = W - R + 1;
    if (ox >= OW) return;
    float acc = 0.f;
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < R; ++i)
            for (int j = 0; j < R; ++j)
                acc += x[((n * C + c) * H + oy + i) * W + ox + j] * w[((o * C + c) * R + i) * R + j];
    y[((n * O + o) * OH + oy) * OW + ox] = acc;
}
''', "cuda", 0.74)
    add("conv_transpose2d", problem("Transposed 2D convolution.", "return self.conv_t(x)", CONV_INPUTS, CONV_CONSTS,
                                    init_body="self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, kernel_size)",
                                    **CONV_INIT),
        '''#include <torch/extension.h>

// Scatter form: each input pixel adds its weighted contribution to an R x R output window.
__global__ void conv_transpose2d_kernel(const float* x, const float* w, float* y, int C, int H, int W, int O, int R) {
    int ix = blockIdx.x * blockDim.x + threadIdx.x, iy = blockIdx.y, c = blockIdx.z % C, n = blockIdx.z / C;
    if (ix >= W) return;
    float v = x[((n * C + c) * H + iy) * W + ix];
    int OH = H + R - 1, OW = W + R - 1;
    for (int o = 0; o < O; ++o)
        for (int i = 0; i < R; ++i)
            for (int j = 0; j < R; ++j)
                atomicAdd(&y[((n * O + o) * OH + iy + i) * OW + ix + j], v * w[((c * O + o) * R + i) * R + j]);
}
''', "cuda", 0.63)

    # Pooling.
    pool_kernel = '''#include <torch/extension.h>

__global__ void {name}_kernel(const float* x, float* y, int H, int W, int K, int S) {{
    int OW = (W - K) / S + 1, OH = (H - K) / S + 1;
    int ox = blockIdx.x * blockDim.x + threadIdx.x, oy = blockIdx.y, plane = blockIdx.z;
    if (ox >= OW || oy >= OH) return;
    const float* p = x + (int64_t)plane * H * W;
    float acc = {init};
    for (int i = 0; i < K; ++i)
        for (int j = 0; j < K; ++j) {{
            float v = p[(oy * S + i) * W + ox * S + j];
            acc = {combine};
        }}
    y[((int64_t)plane * OH + oy) * OW + ox] = {finish};
}}
'''
    add("maxpool2d", problem("2D max pooling.", "return self.pool(x)", POOL_INPUTS, POOL_CONSTS,
                             init_body="self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride)", **POOL_INIT),
        pool_kernel.format(name="max_pool2d", init="-INFINITY", combine="fmaxf(acc, v)", finish="acc"), "cuda", 1.09)
    add("avgpool2d", problem("2D average pooling.", "return self.pool(x)", POOL_INPUTS, POOL_CONSTS,
                             init_body="self.pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride)", **POOL_INIT),
        pool_kernel.format(name="avg_pool2d", init="0.f", combine="acc + v", finish="acc / (K * K)"), "cuda", 1.17)

    # Losses.
    add("mse_loss", problem("Mean squared error between predictions and targets.",
                            "return torch.mean((predictions - targets) ** 2)", LOSS_INPUTS, LOSS_CONSTS,
                            fwd_args=LOSS_ARGS),
        cuda_row_reduce("squared_error", "0.f", "acc + v * v", "acc"), "cuda", 1.90)
    add("cross_entropy", problem("Cross entropy loss for multi-class classification.",
                                 "return torch.nn.functional.cross_entropy(predictions, targets)",
                                 "return [torch.randn(batch_size, num_classes), "
                                 "torch.randint(0, num_classes, (batch_size,))]",
                                 "batch_size = 4096\nnum_classes = 10", fwd_args=LOSS_ARGS),
        triton_row("cross_entropy_rows",
                   "    x = tl.where(mask, x, float('-inf'))\n    m = tl.max(x, axis=0)\n"
                   "    tl.store(y_ptr + row, m + tl.log(tl.sum(tl.exp(x - m), axis=0)))"),
        "triton", 1.35)
    add("smooth_l1_loss", problem("Smooth L1 (Huber) loss.", "return F.smooth_l1_loss(predictions, targets)",
                                  LOSS_INPUTS, LOSS_CONSTS, fwd_args=LOSS_ARGS,
                                  imports="import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"),
        cuda_row_reduce("huber", "0.f", "acc + (fabsf(v) < 1.f ? 0.5f * v * v : fabsf(v) - 0.5f)", "acc"), "cuda", 1.52)
    add("cosine_loss", problem("Cosine similarity loss: 1 minus the mean cosine similarity.",
                               "cos = torch.nn.functional.cosine_similarity(predictions, targets, dim=1)\n"
                               "        return torch.mean(1 - cos)", LOSS_INPUTS, LOSS_CONSTS, fwd_args=LOSS_ARGS),
        cuda_row_reduce("row_dot", "0.f", "acc + v", "acc"), "cuda", 1.44)

    # Scans and misc.
    add("clamp_scale", problem("Scales the input and clamps it to a range.",
                               "return torch.clamp(x * self.scale, min=-self.bound, max=self.bound)",
                               ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS, init_params=", scale: float, bound: float",
                               init_body="self.scale = scale\n        self.bound = bound", init_inputs="2.0, 1.0"),
        triton_elementwise("clamp_scale", "tl.minimum(tl.maximum(v * 2.0, -1.0), 1.0)"), "triton", 1.88)
    add("transpose_copy", problem("Transposes a matrix and makes it contiguous.",
                                  "return x.transpose(0, 1).contiguous()",
                                  "x = torch.randn(rows, cols)\n    return [x]", "rows = 4096\ncols = 8192"),
        cuda_elementwise("copy", "v"), "cuda", 1.02)
    return e


def queries():
    # Relevant: the corpus entries implementing the query's operations (not copies of it).
    q = []

    def add(id_, source, relevant):
        q.append({"id": id_, "source": source, "relevant": relevant})

    add("conv_relu", problem("Convolution followed by a ReLU activation.", "return torch.relu(self.conv(x))",
                             CONV_INPUTS, CONV_CONSTS,
                             init_body="self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)", **CONV_INIT),
        ["conv2d", "relu"])
    add("linear_gelu", problem("Linear transformation followed by GELU.",
                               "return torch.nn.functional.gelu(self.fc(x))",
                               "x = torch.randn(batch_size, in_features)\n    return [x]",
                               "batch_size = 64\nin_features = 2048\nout_features = 1024",
                               init_params=", in_features: int, out_features: int",
                               init_body="self.fc = nn.Linear(in_features, out_features)",
                               init_inputs="in_features, out_features"),
        ["gelu", "linear_relu"])
    add("layernorm_tanh", problem("Layer norm then tanh.", "return torch.tanh(self.norm(x))",
                                  "x = torch.randn(batch_size, hidden)\n    return [x]", "batch_size = 32\nhidden = 4096",
                                  init_params=", hidden: int", init_body="self.norm = nn.LayerNorm(hidden)",
                                  init_inputs="hidden"),
        ["layernorm", "tanh"])
    add("bmm_scale", problem("Batched matmul with the product scaled by a constant.",
                             "return torch.bmm(A, B) * self.scale",
                             "A = torch.randn(batch, m, k)\n    B = torch.randn(batch, k, n)\n    return [A, B]",
                             "batch = 32\nm = 256\nk = 128\nn = 256", init_params=", scale: float",
                             init_body="self.scale = scale", init_inputs="0.5", fwd_args="A, B"),
        ["bmm"])
    add("argmin", problem("Returns the index of the minimum value along a dimension.",
                          "return torch.argmin(x, dim=self.dim)", REDUCE_INPUTS, REDUCE_CONSTS, **DIM_INIT),
        ["argmax_dim", "min_dim"])
    add("cumprod", problem("Cumulative product along a dimension.", "return torch.cumprod(x, dim=self.dim)",
                           REDUCE_INPUTS, REDUCE_CONSTS, **DIM_INIT),
        ["cumsum_dim"])
    add("mae_loss", problem("Mean absolute error loss.", "return torch.mean(torch.abs(predictions - targets))",
                            LOSS_INPUTS, LOSS_CONSTS, fwd_args=LOSS_ARGS),
        ["mse_loss", "smooth_l1_loss"])
    add("rmsnorm_weight", problem("RMSNorm with a learnable scale over the last dimension.",
                                  "norm = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)\n"
                                  "        return norm * self.weight",
                                  "x = torch.randn(batch_size, seq_len, hidden)\n    return [x]",
                                  "batch_size = 8\nseq_len = 512\nhidden = 4096", init_params=", hidden: int",
                                  init_body="self.weight = nn.Parameter(torch.ones(hidden))\n        self.eps = 1e-6",
                                  init_inputs="hidden"),
        ["rmsnorm"])
    add("maxpool1d", problem("1D max pooling over a sequence.", "return self.maxpool(x)",
                             "x = torch.randn(batch_size, channels, length)\n    return [x]",
                             "batch_size = 16\nchannels = 64\nlength = 4096", init_params=", kernel_size: int",
                             init_body="self.maxpool = nn.MaxPool1d(kernel_size)", init_inputs="4"),
        ["maxpool2d"])
    add("softmax_temperature", problem("Softmax with a temperature.", "return torch.softmax(x / self.temperature, dim=-1)",
                                       ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS, init_params=", temperature: float",
                                       init_body="self.temperature = temperature", init_inputs="2.0"),
        ["softmax", "log_softmax"])
    add("log_sigmoid", problem("Log of the sigmoid of the input.", "return torch.log(torch.sigmoid(x))",
                               ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS),
        ["sigmoid"])
    add("frobenius_normalize", problem("Divides the input by its Frobenius norm.",
                                       "norm = torch.norm(x, p='fro')\n        return x / norm",
                                       ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS),
        ["l2_normalize"])
    add("conv_transpose_sigmoid", problem("Transposed convolution followed by sigmoid.",
                                          "return torch.sigmoid(self.deconv(x))", CONV_INPUTS, CONV_CONSTS,
                                          init_body="self.deconv = nn.ConvTranspose2d(in_channels, out_channels, "
                                                    "kernel_size, stride=2)", **CONV_INIT),
        ["conv_transpose2d", "sigmoid"])
    add("avgpool_relu", problem("Average pooling then ReLU.", "return torch.relu(self.avg(x))", POOL_INPUTS,
                                POOL_CONSTS, init_body="self.avg = nn.AvgPool2d(kernel_size, stride)", **POOL_INIT),
        ["avgpool2d", "relu"])
    add("hinge_loss", problem("Hinge loss for binary targets in {-1, 1}.",
                              "return torch.mean(torch.clamp(1 - predictions * targets, min=0))",
                              LOSS_INPUTS, LOSS_CONSTS, fwd_args=LOSS_ARGS),
        ["clamp_scale", "mse_loss"])
    return q


def leakage(entries):
    by_id = {e["id"]: e["source"] for e in entries}
    rows = []

    def add(id_, source, leaks):
        rows.append({"id": id_, "source": source, "leaks": leaks})

    # Copies of a corpus problem: exact, and reformatted in ways that keep the program the same.
    add("copy_relu", by_id["relu"], {"relu": "exact"})
    add("reformatted_relu", '''import torch
import torch.nn as nn


# A simple model.
class Model(nn.Module):
    """Performs a ReLU activation (reformatted copy)."""

    def __init__(self):
        super(Model, self).__init__()
        pass

    def forward(self, x) -> torch.Tensor:
        # elementwise max(x, 0)
        return torch.relu( x )


batch_size = 16
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim)   # random input
    return [x]


def get_init_inputs():
    return []
''', {"relu": "exact"})
    add("renamed_leaky_relu", by_id["leaky_relu"]
        .replace("negative_slope: float", "slope: float").replace("self.negative_slope = negative_slope",
                                                                     "self.alpha = slope")
        .replace("negative_slope=self.negative_slope", "negative_slope=self.alpha")
        .replace("forward(self, x)", "forward(self, inp)").replace("leaky_relu(x,", "leaky_relu(inp,")
        .replace("x = torch.randn(batch_size, dim)\n    return [x]", "t = torch.randn(batch_size, dim)\n    return [t]"),
        {"leaky_relu": "exact"})
    add("reshaped_sum", by_id["sum_dim"].replace("batch_size = 16", "batch_size = 64").replace("dim2 = 256", "dim2 = 1024")
        .replace("reduce_dim = 1", "reduce_dim = 2"), {"sum_dim": "near"})
    add("functional_softmax", by_id["softmax"]
        .replace("import torch.nn as nn\n", "import torch.nn as nn\nimport torch.nn.functional as F\n")
        .replace("torch.softmax(x, dim=1)", "F.softmax(x, dim=1)").replace("dim = 16384", "dim = 4096"),
        {"softmax": "near"})
    add("modern_super_conv2d", by_id["conv2d"].replace("super(Model, self).__init__()", "super().__init__()")
        .replace("kernel_size = 3", "kernel_size = 5"), {"conv2d": "near"})
    # Similar operations that are other problems: nothing may be excluded.
    add("prod_reduction", problem("Product over one dimension.", "return torch.prod(x, dim=self.dim)", REDUCE_INPUTS,
                                  REDUCE_CONSTS, **DIM_INIT), {})
    add("softmax_then_log", problem("Log of a softmax.", "return torch.log(torch.softmax(x, dim=1))",
                                    ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS), {})
    add("depthwise_conv2d", problem("Depthwise 2D convolution.", "return self.conv(x)", CONV_INPUTS, CONV_CONSTS,
                                    init_body="self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, "
                                              "groups=in_channels, bias=False)", **CONV_INIT), {})
    add("avgpool1d", problem("1D average pooling.", "return self.pool(x)",
                             "x = torch.randn(batch_size, channels, length)\n    return [x]",
                             "batch_size = 16\nchannels = 32\nlength = 128\nkernel_size = 2\nstride = 2",
                             init_body="self.pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride)", **POOL_INIT),
        {})
    add("swish_beta", problem("Swish with a scaled input.", "return x * torch.sigmoid(self.beta * x)",
                              ELEMENTWISE_INPUTS, ELEMENTWISE_CONSTS, init_params=", beta: float = 1.0",
                              init_body="self.beta = beta"), {})
    add("gelu_tanh", problem("GELU with the tanh approximation.",
                             "return torch.nn.functional.gelu(x, approximate='tanh')", ELEMENTWISE_INPUTS,
                             ELEMENTWISE_CONSTS), {})
    add("mean_keepdim", problem("Mean over one dimension, keeping it.",
                                "return torch.mean(x, dim=self.dim, keepdim=True)", REDUCE_INPUTS, REDUCE_CONSTS,
                                **DIM_INIT), {})
    add("relu_plus_one", problem("ReLU shifted up by one.", "return torch.relu(x) + 1.0", ELEMENTWISE_INPUTS,
                                 ELEMENTWISE_CONSTS), {})
    return rows


def render(rows):
    return "".join(json.dumps(r, sort_keys=False) + "\n" for r in rows)


def main():
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        return 0
    entries = corpus()
    ids = [e["id"] for e in entries]
    assert len(set(ids)) == len(ids)
    for row in queries():
        assert all(r in ids for r in row["relevant"]), row["id"]
    files = {"corpus.jsonl": render(entries), "queries.jsonl": render(queries()),
             "leakage.jsonl": render(leakage(entries))}
    check = "--check" in sys.argv
    stale = []
    for name, text in files.items():
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("stale (re-run tests/data/retrieval/make_corpus.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
