"""Reference cases for the activation (sigmoid, silu, gelu, quick_gelu, swiglu) and softmax families."""
import torch
import torch.nn.functional as F


def _rand(gen, *shape, scale=1.0):
    return ((torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1) * scale).to(torch.float32)


def _unary(fn, shape, scale, **meta):
    def case(gen):
        x = _rand(gen, *shape, scale=scale).requires_grad_()
        out = fn(x)
        cot = _rand(gen, *out.shape)
        out.backward(cot)
        return {"in.x": x, "out.y": out, "cot.y": cot, "grad.x": x.grad}, meta
    return case


def _swiglu(shape):
    def case(gen):
        # a wide range for gate reaches both of silu's saturated tails
        gate = _rand(gen, *shape, scale=8.0).requires_grad_()
        up = _rand(gen, *shape, scale=2.0).requires_grad_()
        out = F.silu(gate) * up
        cot = _rand(gen, *out.shape)
        out.backward(cot)
        return {"in.gate": gate, "in.up": up, "out.y": out, "cot.y": cot,
                "grad.gate": gate.grad, "grad.up": up.grad}, {}
    return case


CASES = {
    # Inputs span [-scale, scale] so both saturated tails and the curved middle are covered.
    "sigmoid": _unary(torch.sigmoid, (7, 129), 12.0),
    "silu": _unary(F.silu, (3, 5, 129), 12.0),
    "gelu": _unary(F.gelu, (3, 5, 129), 8.0),
    "gelu_tanh": _unary(lambda x: F.gelu(x, approximate="tanh"), (3, 5, 129), 8.0),
    # transformers' QuickGELUActivation (CLIP's hidden_act "quick_gelu")
    "quick_gelu": _unary(lambda x: x * torch.sigmoid(1.702 * x), (3, 5, 129), 12.0),
    "swiglu": _swiglu((5, 7, 131)),
}
for _name, _fn in (("softmax", F.softmax), ("log_softmax", F.log_softmax)):
    # logits of a realistic spread (|x| <= 10), and one long row to exercise the vector lanes
    for _d in (0, 1, 2, -1):
        CASES[f"{_name}_dim{_d}"] = _unary(lambda x, f=_fn, d=_d: f(x, dim=d), (5, 7, 129), 10.0, dim=_d)
    CASES[f"{_name}_long_row"] = _unary(lambda x, f=_fn: f(x, dim=-1), (3, 5001), 10.0, dim=-1)
