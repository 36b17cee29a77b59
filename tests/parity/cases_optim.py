"""Reference cases for the optimizer layer: AdamW training runs, LR schedules, grad-norm clipping."""
import math

import torch
import torch.nn.functional as F

STEPS = 20
HYPER = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}


def _rand(gen, *shape, dtype=torch.float32):
    return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)


def lr_lambda(training_steps, warmup_steps, decay_ratio, decay_type, min_lr_factor):
    """The schedule titan's optim::lr_factor documents, written out independently for LambdaLR."""
    if decay_ratio is None:
        decay_steps = training_steps - warmup_steps
    else:
        decay_steps = round(decay_ratio * training_steps)
    decay_start = training_steps - decay_steps

    def factor(step):
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if step < decay_start or decay_steps == 0:
            return 1.0
        p = min(1.0, (step - decay_start) / decay_steps)
        shape = {"linear": 1 - p, "cosine": 0.5 * (1 + math.cos(math.pi * p)),
                 "sqrt": 1 - math.sqrt(p), "constant": 1.0}[decay_type]
        return min_lr_factor + (1 - min_lr_factor) * shape
    return factor


def _schedule_meta(training_steps, warmup_steps, decay_ratio, decay_type, min_lr_factor):
    meta = {"training_steps": training_steps, "warmup_steps": warmup_steps, "decay_type": decay_type,
            "min_lr_factor": min_lr_factor}
    if decay_ratio is not None:
        meta["decay_ratio"] = decay_ratio
    return meta


def _adamw_run(dtype, schedule=None, max_norm=None):
    """Two Linear layers, y = fc2((fc1 x)^2), mean-squared error, trained for STEPS steps on a fresh
    batch each step with torch.optim.AdamW (optionally LambdaLR and clip_grad_norm_)."""
    def case(gen):
        x = _rand(gen, STEPS, 16, 8, dtype=dtype)
        t = _rand(gen, STEPS, 16, 4, dtype=dtype)
        params = {"fc1.weight": _rand(gen, 16, 8, dtype=dtype) * 0.5,
                  "fc1.bias": _rand(gen, 16, dtype=dtype) * 0.5,
                  "fc2.weight": _rand(gen, 4, 16, dtype=dtype) * 0.5}
        tensors = {"in.x": x, "in.t": t}
        for name, p in params.items():
            tensors["in." + name] = p.clone()
            p.requires_grad_()
        opt = torch.optim.AdamW(params.values(), lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                                eps=HYPER["eps"], weight_decay=HYPER["weight_decay"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(**schedule)) if schedule else None
        losses, norms, lrs = [], [], []
        for s in range(STEPS):
            opt.zero_grad()
            h = F.linear(x[s], params["fc1.weight"], params["fc1.bias"])
            loss = ((F.linear(h * h, params["fc2.weight"]) - t[s]) ** 2).mean()
            loss.backward()
            if max_norm is not None:
                norms.append(float(torch.nn.utils.clip_grad_norm_(params.values(), max_norm)))
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            if sched:
                sched.step()
            losses.append(float(loss))
        for name, p in params.items():
            tensors["out." + name] = p.detach()
            tensors["out." + name + ".exp_avg"] = opt.state[p]["exp_avg"]
            tensors["out." + name + ".exp_avg_sq"] = opt.state[p]["exp_avg_sq"]
        tensors["out.loss"] = torch.tensor(losses, dtype=torch.float64)
        tensors["out.lr"] = torch.tensor(lrs, dtype=torch.float64)
        meta = dict(HYPER, steps=STEPS)
        if max_norm is not None:
            tensors["out.grad_norm"] = torch.tensor(norms, dtype=torch.float64)
            meta["max_norm"] = max_norm
        if schedule:
            meta.update(_schedule_meta(**schedule))
        return tensors, meta
    return case


def _lr_schedule(**schedule):
    """The lr LambdaLR hands the optimizer at each step, over and past the schedule's end."""
    def case(gen):
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=3e-4)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(**schedule))
        lrs = []
        for _ in range(schedule["training_steps"] + 5):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return {"out.lr": torch.tensor(lrs, dtype=torch.float64)}, dict(_schedule_meta(**schedule), lr=3e-4)
    return case


def _clip(max_norm, norm_type):
    def case(gen):
        shapes = [(7, 5), (13,), (3, 4, 2)]
        params = [torch.zeros(*s, requires_grad=True) for s in shapes]
        tensors = {}
        for i, p in enumerate(params):
            p.grad = _rand(gen, *p.shape)
            tensors[f"in.g{i}"] = p.grad.clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
        for i, p in enumerate(params):
            tensors[f"out.g{i}"] = p.grad
        tensors["out.total_norm"] = total.to(torch.float64).reshape(())
        return tensors, {"max_norm": max_norm, "norm_type": norm_type, "count": len(params)}
    return case


_WARMUP_COSINE = dict(training_steps=STEPS, warmup_steps=4, decay_ratio=None, decay_type="cosine",
                      min_lr_factor=0.1)

CASES = {
    "adamw_f64": _adamw_run(torch.float64),
    "adamw_f32": _adamw_run(torch.float32),
    "adamw_schedule_clip_f64": _adamw_run(torch.float64, schedule=_WARMUP_COSINE, max_norm=0.5),
    "lr_warmup_cosine": _lr_schedule(**dict(_WARMUP_COSINE, training_steps=50, warmup_steps=7)),
    "lr_warmup_linear": _lr_schedule(training_steps=40, warmup_steps=3, decay_ratio=None, decay_type="linear",
                                     min_lr_factor=0.0),
    "lr_wsd_sqrt": _lr_schedule(training_steps=60, warmup_steps=5, decay_ratio=0.25, decay_type="sqrt",
                                min_lr_factor=0.05),
    "lr_wsd_cosine": _lr_schedule(training_steps=33, warmup_steps=0, decay_ratio=0.5, decay_type="cosine",
                                  min_lr_factor=0.0),
    "lr_warmup_constant": _lr_schedule(training_steps=20, warmup_steps=10, decay_ratio=None,
                                       decay_type="constant", min_lr_factor=0.0),
    "clip_l2": _clip(1.0, 2.0),
    "clip_inf": _clip(0.5, math.inf),
    "clip_below_max": _clip(100.0, 2.0),
}
