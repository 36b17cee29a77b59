"""Reference cases for GRPO's numerical core: token log-probabilities and entropies at a
temperature, group-relative advantages, and the clipped policy loss (f32 inputs).

The references are the published formulas written plainly in torch, computed in float64 from the
f32 inputs and stored as f32 (f64 for advantages):
- token_log_probs: log_softmax(logits / T).gather(target), 0 on ignored rows.
- token_entropy: sum of entr(softmax(logits / T)) (entr(0) = 0, so -inf logits add nothing).
- group_advantages: (r - mean) / (std + eps) per group, the std population (TorchTitan's
  experiments/rl) or unbiased (torch.std, as VeRL's compute_grpo_outcome_advantage).
- policy_loss: VeRL's compute_policy_loss (core_algos.py: pg_losses1/2 with torch.maximum, dual
  clip with torch.min where A < 0) with DAPO's separate clip_low / clip_high, plus VeRL's k3
  ("low_var_kl", with its clamps: d to +-20, k3 to +-10) times kl_coef, summed over the mask and divided by the
  normaliser. Gradients come from torch's autograd through those formulas.
Vocabularies: 129 (odd), 5000 (several 1024-logit chunks, not a multiple of them), 32000 (two row
segments, the second partial), 100003 (prime, a few rows split across threads).
"""
import torch


def _rand(gen, *shape):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1).float()


def _token_log_probs(shape, temperature, ignore_index=-100, ignore_frac=0.25, target_dtype=torch.int64,
                     logit_scale=4.0):
    def case(gen):
        vocab = shape[-1]
        x = (_rand(gen, *shape) * logit_scale).requires_grad_()
        t = torch.randint(0, vocab, shape[:-1], generator=gen)
        t[torch.rand(shape[:-1], generator=gen) < ignore_frac] = ignore_index
        ignored = t == ignore_index
        lp = torch.log_softmax(x.double() / temperature, dim=-1)
        picked = lp.gather(-1, t.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        out = torch.where(ignored, torch.zeros_like(picked), picked)
        cot = _rand(gen, *out.shape)
        out.backward(cot.double())
        return ({"in.x": x, "in.t": t.to(target_dtype), "out.logp": out.float(), "cot.logp": cot,
                 "grad.x": x.grad},
                {"temperature": repr(temperature), "ignore_index": ignore_index})
    return case


def _token_entropy(shape, temperature, logit_scale=4.0, masked_frac=0.0, peaked_rows=0):
    def case(gen):
        x = _rand(gen, *shape) * logit_scale
        x[torch.rand(shape, generator=gen) < masked_frac] = float("-inf")
        flat = x.view(-1, shape[-1])
        for r in range(peaked_rows):  # one logit far above the rest: entropy near 0
            flat[r, r % shape[-1]] = 60.0
        h = torch.special.entr(torch.softmax(x.double() / temperature, dim=-1)).sum(-1)
        return {"in.x": x, "out.h": h.float()}, {"temperature": repr(temperature)}
    return case


def _group_advantages(groups, group_size, norm, binary, eps=1e-6):
    def case(gen):
        n = groups * group_size
        if binary:
            r = (torch.rand(n, generator=gen, dtype=torch.float64) < 0.5).double()
            r[:group_size] = 1.0  # a group that all solved the task
        else:
            r = torch.randn(n, generator=gen, dtype=torch.float64)
            r[:group_size] = 0.1  # equal rewards whose float mean is not exactly 0.1
        g = r.view(groups, group_size)
        a = g - g.mean(dim=1, keepdim=True)
        if norm == 1:
            a = a / (g.std(dim=1, unbiased=False, keepdim=True) + eps)
        elif norm == 2:
            a = a / (g.std(dim=1, keepdim=True) + eps)
        return ({"in.rewards": r, "out.adv": a.reshape(-1)},
                {"group_size": group_size, "norm": norm, "eps": repr(eps)})
    return case


def _policy_loss(clip_low=0.2, clip_high=0.2, dual_clip=0.0, kl_coef=0.0, with_ref=False, log_ratio_clamp=20.0,
                 rows=6, cols=37):
    def case(gen):
        logp = -torch.rand(rows, cols, generator=gen, dtype=torch.float64) * 4
        noise = torch.randn(rows, cols, generator=gen, dtype=torch.float64) * 0.3
        wide = torch.rand(rows, cols, generator=gen) < 0.2  # log-ratios past the dual clip's log c
        noise[wide] = _rand(gen, int(wide.sum())).double() * 3
        far = torch.rand(rows, cols, generator=gen) < 0.05  # past the log-ratio clamp
        noise[far] = torch.sign(_rand(gen, int(far.sum()))).double() * (log_ratio_clamp + 5)
        old = (logp - noise).float()
        logp = logp.float()
        adv = torch.randn(rows, generator=gen, dtype=torch.float64).float()
        adv[0] = 0.0
        mask = torch.ones(rows, cols)
        for r in range(rows):  # right padding of each sequence, one sequence fully padded
            length = int(torch.randint(1, cols + 1, (1,), generator=gen))
            mask[r, length:] = 0
        mask[-1] = 0
        mask[1, 3] = 0  # a hole, as a prompt token inside a packed row
        ref = (logp.double() + torch.randn(rows, cols, generator=gen, dtype=torch.float64) * 0.2).float()
        # A few references far enough off for VeRL's clamps: d past +-20, k3 past 10.
        off = torch.rand(rows, cols, generator=gen) < 0.05
        ref[off] = logp[off] + torch.sign(_rand(gen, int(off.sum()))) * torch.tensor([3.0, 25.0])[
            torch.randint(0, 2, (int(off.sum()),), generator=gen)]
        normaliser = float(mask.sum()) + 17  # other ranks' tokens count too

        lp = logp.double().requires_grad_()
        A = adv.double()[:, None]
        log_ratio = torch.clamp(lp - old.double(), -log_ratio_clamp, log_ratio_clamp)
        ratio = torch.exp(log_ratio)
        pg1 = -A * ratio
        pg2 = -A * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
        clip1 = torch.maximum(pg1, pg2)
        clipped = pg2 > pg1
        pg = clip1
        if dual_clip > 0:
            pg3 = -A * dual_clip
            pg = torch.where(A < 0, torch.min(pg3, clip1), clip1)
            clipped = clipped | ((A < 0) & (pg3 < clip1))
        d = torch.clamp(ref.double() - lp, -20, 20)
        k3 = torch.clamp(torch.exp(d) - d - 1, -10, 10)
        per_token = pg + kl_coef * k3 if kl_coef > 0 else pg
        m = mask.double()
        loss = (per_token * m).sum() / normaliser
        cot = torch.tensor(0.75, dtype=torch.float64)
        loss.backward(cot)
        valid = m.sum()
        tensors = {"in.logp": logp, "in.old_logp": old, "in.adv": adv, "in.mask": mask,
                   "out.loss": loss.float(), "cot.loss": cot.float(), "grad.logp": lp.grad.float(),
                   "out.clip_fraction": ((clipped.double() * m).sum() / valid).reshape(1),
                   "out.ratio_mean": ((ratio * m).sum() / valid).detach().reshape(1),
                   "out.kl_mean": (((k3 * m).sum() / valid).detach() if with_ref else torch.zeros(())).reshape(1),
                   "out.tokens": valid.reshape(1)}
        if with_ref:
            tensors["in.ref"] = ref
        meta = {"clip_low": repr(clip_low), "clip_high": repr(clip_high), "dual_clip": repr(dual_clip),
                "kl_coef": repr(kl_coef), "log_ratio_clamp": repr(log_ratio_clamp), "normaliser": repr(normaliser)}
        return tensors, meta
    return case


CASES = {
    "tlp_129_t1": _token_log_probs((7, 129), 1.0),
    "tlp_5000_3d_i32_t07": _token_log_probs((2, 9, 5000), 0.7, target_dtype=torch.int32, ignore_index=3),
    "tlp_32000_t13": _token_log_probs((16, 32000), 1.3, logit_scale=8.0),
    "tlp_100003_few_rows_t06": _token_log_probs((3, 100003), 0.6, ignore_frac=0.0),
    "tlp_all_ignored": _token_log_probs((4, 129), 0.9, ignore_frac=1.0),
    "entropy_129_t1": _token_entropy((7, 129), 1.0, peaked_rows=2),
    "entropy_5000_3d_t07_masked": _token_entropy((2, 9, 5000), 0.7, masked_frac=0.3),
    "entropy_32000_t13": _token_entropy((16, 32000), 1.3, logit_scale=8.0, peaked_rows=3),
    "entropy_100003_t06": _token_entropy((3, 100003), 0.6),
    "adv_none_binary": _group_advantages(8, 4, 0, True),
    "adv_std_binary": _group_advantages(8, 4, 1, True),
    "adv_unbiased_binary": _group_advantages(8, 4, 2, True),
    "adv_none_normal": _group_advantages(5, 3, 0, False),
    "adv_std_normal": _group_advantages(5, 3, 1, False),
    "adv_unbiased_normal": _group_advantages(5, 3, 2, False),
    "adv_std_group_of_one": _group_advantages(6, 1, 1, False),
    "pl_symmetric": _policy_loss(),
    "pl_asymmetric": _policy_loss(clip_high=0.28),
    "pl_dual_clip": _policy_loss(dual_clip=3.0),
    "pl_kl": _policy_loss(clip_high=0.28, kl_coef=0.05, with_ref=True),
    "pl_kl_dual_clip": _policy_loss(clip_low=0.1, clip_high=0.3, dual_clip=2.5, kl_coef=0.1, with_ref=True),
    "pl_ref_without_kl": _policy_loss(with_ref=True),
    "pl_tight_clamp": _policy_loss(clip_high=0.28, log_ratio_clamp=1.0),
    "pl_tight_clamp_dual_clip": _policy_loss(clip_high=0.28, dual_clip=3.0, log_ratio_clamp=1.5),
}
