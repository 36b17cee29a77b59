#pragma once
// 2-D convolution over contiguous NCHW tensors (groups 1, dilation 1, zero padding), the plain
// path: each image's patches unrolled into a column matrix (im2col) and multiplied by the weight
// through gemm (OpenBLAS for f32 and f64). It is the reference the oneDNN path
// (onednn_conv2d.h) is tested against, and the path for f64.
#include <cstdint>

namespace titan::kernels::cpu {

// x [n, c, h, w], weight [o, c, kh, kw], y [n, o, oh, ow] with
// oh = (h + pad_top + pad_bottom - kh) / stride + 1 (ow likewise).
struct Conv2dGeometry {
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t stride;
  int64_t pad_top, pad_bottom, pad_left, pad_right;
  int64_t oh() const { return (h + pad_top + pad_bottom - kh) / stride + 1; }
  int64_t ow() const { return (w + pad_left + pad_right - kw) / stride + 1; }
  // A 1x1 stride-1 convolution without padding: the image itself is the column matrix.
  bool pointwise() const {
    return kh == 1 && kw == 1 && stride == 1 && pad_top == 0 && pad_bottom == 0 && pad_left == 0 &&
           pad_right == 0;
  }
};

// y = conv(x, weight) + bias; bias may be null.
template <typename T>
void conv2d_fwd_im2col(const Conv2dGeometry& g, const T* x, const T* weight, const T* bias, T* y);
// dx = the gradient of x given dy (overwritten, not accumulated).
template <typename T>
void conv2d_bwd_data_im2col(const Conv2dGeometry& g, const T* dy, const T* weight, T* dx);
// dweight and dbias (either may be null) given dy and x, overwritten.
template <typename T>
void conv2d_bwd_weight_im2col(const Conv2dGeometry& g, const T* dy, const T* x, T* dweight, T* dbias);

}  // namespace titan::kernels::cpu
