"""Reference cases for embedding and cross-entropy (f32).

titan's cross_entropy takes the class dim last, PyTorch's second; the references flatten logits
to [rows, V] for PyTorch. PyTorch wants i64 targets: i32 cases are computed with a long copy and
stored as i32. Vocabularies: 129 (odd), 5000 (several 1024-logit chunks, not a multiple of
them), 32000 (the 32k case: two row segments, the second partial), 100003 (prime; a few rows
split into seven segments across threads).
"""
import torch
import torch.nn.functional as F


def _rand(gen, *shape):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1).float()


def _embedding(vocab, dim, ids_shape, id_dtype):
    def case(gen):
        w = _rand(gen, vocab, dim).requires_grad_()
        # Few distinct ids, so rows of the gradient sum several tokens.
        ids = torch.randint(0, min(vocab, 17), ids_shape, generator=gen) * max(1, vocab // 17)
        out = F.embedding(ids, w)
        cot = _rand(gen, *out.shape)
        out.backward(cot)
        return {"in.ids": ids.to(id_dtype), "in.w": w, "out.y": out, "cot.y": cot, "grad.w": w.grad}, {}
    return case


def _cross_entropy(shape, reduction, ignore_index=-100, ignore_frac=0.25, target_dtype=torch.int64,
                   logit_scale=4.0):
    def case(gen):
        vocab = shape[-1]
        x = (_rand(gen, *shape) * logit_scale).requires_grad_()
        t = torch.randint(0, vocab, shape[:-1], generator=gen)
        drop = torch.rand(shape[:-1], generator=gen) < ignore_frac
        t[drop] = ignore_index
        loss = F.cross_entropy(x.reshape(-1, vocab), t.reshape(-1), ignore_index=ignore_index,
                               reduction=reduction)
        cot = torch.tensor(0.75)
        loss.backward(cot)
        return ({"in.x": x, "in.t": t.to(target_dtype), "out.loss": loss, "cot.loss": cot, "grad.x": x.grad},
                {"ignore_index": ignore_index, "sum": int(reduction == "sum")})
    return case


CASES = {
    "embedding_i64": _embedding(1000, 64, (4, 33), torch.int64),
    "embedding_i32_odd": _embedding(129, 7, (129,), torch.int32),
    "ce_mean_129": _cross_entropy((7, 129), "mean"),
    "ce_sum_129_3d": _cross_entropy((2, 5, 129), "sum"),
    "ce_mean_5000_i32": _cross_entropy((33, 5000), "mean", target_dtype=torch.int32),
    "ce_sum_5000": _cross_entropy((33, 5000), "sum", ignore_index=3),
    "ce_mean_32000": _cross_entropy((16, 32000), "mean", logit_scale=8.0),
    "ce_sum_32000": _cross_entropy((16, 32000), "sum"),
    "ce_mean_100003_few_rows": _cross_entropy((3, 100003), "mean", ignore_frac=0.0),
    "ce_mean_all_ignored": _cross_entropy((4, 129), "mean", ignore_frac=1.0),
}
