// AdamW for many tensors in one launch (adamw_cuda.h). The tensors' descriptors sit in a device
// table; the grid strides over all their chunks of kAdamWChunk elements, and a block finds its
// chunk's tensor by binary search on first_chunk, so the launch size depends neither on the count
// nor on the sizes. Each element is read once (grad, master or weight, both moments) and written
// once; the arithmetic is host/train/optim.cpp's optim_update, operation by operation, in float32
// (lt_kernels builds with --fmad=false, so no multiply-add is contracted behind our back).
#include "host/train/kernels/adamw_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "host/quant/kernels/cuda_types.cuh"

namespace luatune {
namespace cuda {

namespace {

constexpr int kThreads = 512;  // 32 elements of a chunk per thread

// The float32 scalars of optim_update: ATen rounds each double Scalar to float32 before using it
// on float32 tensors, so these roundings are the CPU path's too.
struct Coefs {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bc2_sqrt, eps;
  float decay;      // 1 - lr * weight_decay
  float step_size;  // -lr / bias_correction1
  bool decay_on;    // weight_decay > 0 (optim_update skips the multiply otherwise)
};

// Elements [begin, end) of one tensor.
template <typename WT, typename GT>
__device__ void update_range(const AdamWTensor& t, int64_t begin, int64_t end, const Coefs& c) {
  WT* w_out = static_cast<WT*>(t.weight);
  const GT* g_in = static_cast<const GT*>(t.grad);
  float* master = t.master;
  float* m_p = t.exp_avg;
  float* v_p = t.exp_avg_sq;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float g = Elem<GT>::load(g_in, i);
    float w = master ? master[i] : Elem<WT>::load(w_out, i);
    if (c.decay_on) w = w * c.decay;                           // w.mul_(1 - lr * wd)
    const float m = m_p[i] * c.beta1 + c.one_minus_beta1 * g;  // exp_avg.mul_(b1).add_(g, 1 - b1)
    const float v =
        v_p[i] * c.beta2 + c.one_minus_beta2 * g * g;   // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
    const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;  // sqrt().div_(sqrt(bc2)).add_(eps)
    w = w + c.step_size * (m / denom);                  // w.addcdiv_(m, denom, -lr / bc1)
    m_p[i] = m;
    v_p[i] = v;
    if (master) master[i] = w;
    Elem<WT>::store(w_out, i, w);
  }
}

template <typename WT>
__device__ void update_range_w(const AdamWTensor& t, int64_t begin, int64_t end, const Coefs& c) {
  switch (static_cast<Dtype>(t.grad_dtype)) {
    case Dtype::bf16:
      update_range<WT, __nv_bfloat16>(t, begin, end, c);
      break;
    case Dtype::f16:
      update_range<WT, __half>(t, begin, end, c);
      break;
    default:
      update_range<WT, float>(t, begin, end, c);
  }
}

__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const AdamWTensor* __restrict__ tensors, int count, int64_t total_chunks, AdamWScalars s,
                 const float* __restrict__ lr_scale, const float* __restrict__ skip) {
  if (skip && *skip != 0.0f) return;  // a NaN flag skips too
  // The double arithmetic of the CPU path (fused_adamw.cpp), then the roundings ATen makes.
  const double lr = lr_scale ? s.lr * static_cast<double>(*lr_scale) : s.lr;
  Coefs c;
  c.beta1 = static_cast<float>(s.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - s.beta1);
  c.beta2 = static_cast<float>(s.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - s.beta2);
  c.bc2_sqrt = static_cast<float>(s.bias_correction2_sqrt);
  c.eps = static_cast<float>(s.eps);
  c.decay = static_cast<float>(1.0 - lr * s.weight_decay);
  c.step_size = static_cast<float>(-lr / s.bias_correction1);
  c.decay_on = s.weight_decay > 0;

  for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    // The last tensor whose first chunk is at or before this one (empty tensors are not in the table).
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tensors[mid].first_chunk <= chunk)
        lo = mid;
      else
        hi = mid - 1;
    }
    const AdamWTensor t = tensors[lo];
    const int64_t begin = (chunk - t.first_chunk) * kAdamWChunk;
    const int64_t end = begin + kAdamWChunk < t.numel ? begin + kAdamWChunk : t.numel;
    switch (static_cast<Dtype>(t.weight_dtype)) {
      case Dtype::bf16:
        update_range_w<__nv_bfloat16>(t, begin, end, c);
        break;
      case Dtype::f16:
        update_range_w<__half>(t, begin, end, c);
        break;
      default:
        update_range_w<float>(t, begin, end, c);
    }
  }
}

}  // namespace

int adamw_step(const AdamWTensor* tensors, int count, int64_t total_chunks, const AdamWScalars& scalars,
               const float* lr_scale, const float* skip, void* stream) {
  if (count <= 0 || total_chunks <= 0) return 0;
  // Enough blocks to fill the device (4 of 512 threads per SM), each striding over the chunks.
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return static_cast<int>(e);
  const int64_t want = static_cast<int64_t>(sms > 0 ? sms : 1) * 4;
  const unsigned grid = static_cast<unsigned>(total_chunks < want ? total_chunks : want);
  adamw_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(tensors, count, total_chunks,
                                                                         scalars, lr_scale, skip);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace luatune
