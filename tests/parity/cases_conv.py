"""Reference cases for the autoencoder's ops: conv2d (3x3 padded 1, 1x1, and the 3x3 stride-2
convolution after diffusers' Downsample2D pad (0, 1, 0, 1)), GroupNorm (32 groups, eps 1e-6, as
FLUX's autoencoder) and nearest upsampling by 2 (its Upsample2D), with gradients of every input."""
import torch
import torch.nn.functional as F

from cases_norm import _rand, _with_grads


def _conv(x_shape, out_ch, k, stride, pad, bias=True):
    """pad: (left, right, top, bottom), F.pad's order."""
    def case(gen):
        x = _rand(gen, *x_shape).requires_grad_()
        w = _rand(gen, out_ch, x_shape[1], k, k, lo=-0.3, hi=0.3).requires_grad_()
        inputs = {"x": x, "w": w}
        b = None
        if bias:
            b = inputs["b"] = _rand(gen, out_ch).requires_grad_()
        y = F.conv2d(F.pad(x, pad), w, b, stride=stride)
        left, right, top, bottom = pad
        return _with_grads(inputs, y, gen), {"stride": stride, "pad_top": top, "pad_bottom": bottom,
                                             "pad_left": left, "pad_right": right}
    return case


def _group_norm(shape, groups, eps=1e-6, affine=True, offset=0.0):
    def case(gen):
        x = (_rand(gen, *shape, lo=-2, hi=3) + offset).requires_grad_()
        inputs = {"x": x}
        w = b = None
        if affine:
            w = inputs["w"] = _rand(gen, shape[1], lo=0.5, hi=1.5).requires_grad_()
            b = inputs["b"] = _rand(gen, shape[1]).requires_grad_()
        y = F.group_norm(x, groups, w, b, eps)
        return _with_grads(inputs, y, gen), {"groups": groups, "eps": eps}
    return case


def _upsample(shape, factor):
    def case(gen):
        x = _rand(gen, *shape).requires_grad_()
        y = F.interpolate(x, scale_factor=factor, mode="nearest")
        return _with_grads({"x": x}, y, gen), {"factor": factor}
    return case


CASES = {
    "conv2d_3x3": _conv((2, 16, 12, 10), 24, 3, 1, (1, 1, 1, 1)),
    "conv2d_3x3_nobias": _conv((1, 8, 9, 9), 8, 3, 1, (1, 1, 1, 1), bias=False),
    "conv2d_1x1": _conv((2, 32, 8, 8), 16, 1, 1, (0, 0, 0, 0)),
    "conv2d_downsample": _conv((2, 16, 16, 16), 16, 3, 2, (0, 1, 0, 1)),
    "conv2d_downsample_odd": _conv((1, 8, 15, 13), 8, 3, 2, (0, 1, 0, 1)),
    "group_norm_32": _group_norm((2, 128, 8, 8), 32),
    "group_norm_plain": _group_norm((2, 12, 5, 7), 4, eps=1e-5, affine=False),
    "group_norm_offset": _group_norm((1, 64, 16, 16), 32, offset=50.0),
    "upsample_nearest_2": _upsample((2, 8, 5, 7), 2),
}
