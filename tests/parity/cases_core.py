"""Reference cases for elementwise arithmetic, reductions and matmul/linear."""
import torch


def _rand(gen, *shape, dtype=torch.float32):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)


def _binary(op, sa, sb, positive_b=False):
    def case(gen):
        a = _rand(gen, *sa).requires_grad_()
        b = _rand(gen, *sb)
        if positive_b:
            b = b.abs() + 0.5
        b.requires_grad_()
        out = op(a, b)
        cot = _rand(gen, *out.shape)
        out.backward(cot)
        return {"in.a": a, "in.b": b, "out.y": out, "cot.y": cot, "grad.a": a.grad, "grad.b": b.grad}, {}
    return case


def _matmul(sa, sb):
    return _binary(torch.matmul, sa, sb)


def _linear(m, k, n, bias):
    def case(gen):
        x = _rand(gen, 3, m, k).requires_grad_()
        w = _rand(gen, n, k).requires_grad_()
        b = _rand(gen, n).requires_grad_() if bias else None
        out = torch.nn.functional.linear(x, w, b)
        cot = _rand(gen, *out.shape)
        out.backward(cot)
        t = {"in.x": x, "in.w": w, "out.y": out, "cot.y": cot, "grad.x": x.grad, "grad.w": w.grad}
        if bias:
            t.update({"in.b": b, "grad.b": b.grad})
        return t, {}
    return case


def _reduce(name, dim, shape=(7, 129, 5)):
    def case(gen):
        x = _rand(gen, *shape).requires_grad_()
        if name == "sum":
            out = x.sum(dim)
        elif name == "mean":
            out = x.mean(dim)
        elif name == "max":
            out = x.max(dim).values
        else:
            out = x.var(dim)
        cot = _rand(gen, *out.shape)
        out.backward(cot)
        return {"in.x": x, "out.y": out, "cot.y": cot, "grad.x": x.grad}, {"dim": dim}
    return case


CASES = {
    "add_broadcast": _binary(torch.add, (4, 7, 129), (7, 1)),
    "sub_broadcast": _binary(torch.sub, (7, 1), (4, 7, 129)),
    "mul_broadcast": _binary(torch.mul, (4, 1, 129), (7, 129)),
    "div_broadcast": _binary(torch.div, (4, 7, 129), (129,), positive_b=True),
    "matmul_2d": _matmul((65, 129), (129, 33)),
    "matmul_batched_broadcast": _matmul((3, 1, 17, 9), (4, 9, 7)),
    "linear_bias": _linear(7, 129, 33, True),
    "linear_nobias": _linear(1, 64, 256, False),
}
for _op in ("sum", "mean", "max", "var"):
    for _d in (0, 1, 2):
        CASES[f"{_op}_dim{_d}"] = _reduce(_op, _d)
