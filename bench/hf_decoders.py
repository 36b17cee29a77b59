#!/usr/bin/env python3
"""titan's hf family against transformers' own classes (issue 46's target: for a Mistral-like model
with sliding-window attention and a Gemma-2-like one with soft-capping, at bench_train_step's M
shape, titan bf16 >= 1.3x the best transformers training step on PyTorch 2, eager or compiled,
f32 or bf16), in one run on one CPU.

  .venv/bin/python bench/hf_decoders.py [--titan build/titan --models mistral,gemma2 --warmup 1
      --steps 3 --rounds 1 --threads N --variants "eager,compile,eager bf16,compile bf16"]

Each model is a config.json written by transformers' own config class at M's dims (dim 512, 8
layers, 8 heads of 64, 4 kv heads, ffn 1536, vocab 8192; batch 4 x seq 512, as bench/train_step.cpp's
M), with its family's marks (MODELS). titan trains it through its command, `titan train` with
[model] name = "hf" and hf_config naming the file, in f32 and in bf16 (training.mixed_precision_param
= "bfloat16"), on the King James text (dataset "kjv", byte tokenizer); a step's time is the
trainer's own step_time_s in metrics.jsonl. transformers trains the class the file names
(bench/hf_decoders_torch.py): its loss, AdamW (fused), clipping, eager and torch.compile of the
whole model, f32 and bf16 autocast, with the class's attention: "sdpa" where the class supports
it with windows and soft-caps (Mistral), else "eager" (Gemma 2: transformers refuses sdpa for its
soft-cap; flex_attention, which would take it, has no backward on the CPU in torch 2.15). Both sides: TorchTitan's AdamW
(lr 8e-4, betas 0.9 / 0.95, weight decay 0.1), clipping at 1, the same threads; warm-up steps
(torch.compile's compilation among them) are left out, figures are the median timed step.

titan runs OpenBLAS for f32 with OPENBLAS_CORETYPE set where OpenBLAS would pick kernels older than
the CPU (titan's start-up log names them), oneDNN for bf16; PyTorch its own MKL and oneDNN, with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 as the C++ benchmarks run it.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# bench/train_step.cpp's M.
M = dict(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1536, vocab_size=8192, seq=512, batch=4)
# Half the sequence: Mistral 7B v0.1's 4096-token window over its 8192-token training context,
# and Gemma 2's 4096 over 8192.
WINDOW = M["seq"] // 2
COMMON = dict(hidden_size=M["dim"], num_hidden_layers=M["n_layers"], num_attention_heads=M["n_heads"],
              num_key_value_heads=M["n_kv_heads"], intermediate_size=M["ffn_dim"], vocab_size=M["vocab_size"],
              max_position_embeddings=4 * M["seq"], bos_token_id=1, eos_token_id=2, pad_token_id=0)

# model -> (transformers config class, keys, the attention each class trains with by default).
MODELS = {
    # Mistral 7B: head_dim = dim / heads, every layer windowed, untied embeddings, SiLU-gated FFN.
    "mistral": ("MistralConfig", dict(COMMON, head_dim=M["dim"] // M["n_heads"], sliding_window=WINDOW,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                                      tie_word_embeddings=False), "sdpa"),
    # Gemma 2: sandwich norms, sliding and full layers alternating, attention logits soft-capped at
    # 50 and final logits at 30, query_pre_attn_scalar as Gemma 2 27B sets it (dim / heads), tied
    # embeddings scaled by sqrt(dim), GELU-tanh gate. transformers refuses sdpa for it (soft-cap).
    "gemma2": ("Gemma2Config", dict(COMMON, head_dim=M["dim"] // M["n_heads"], sliding_window=WINDOW,
                                    query_pre_attn_scalar=M["dim"] // M["n_heads"], attn_logit_softcapping=50.0,
                                    final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh",
                                    layer_types=["sliding_attention", "full_attention"] * (M["n_layers"] // 2),
                                    tie_word_embeddings=True), "eager"),
}
TARGET = 1.3
# transformers' side: eager and torch.compile of the whole model, f32 and bf16 autocast.
DEFAULT_VARIANTS = ("eager", "compile", "eager bf16", "compile bf16")
HYPER = dict(lr=8e-4, eps=1e-8, weight_decay=0.1, max_norm=1.0)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return []


def loadavg():
    with open("/proc/loadavg") as f:
        return ", ".join(f.read().split()[:3])


def write_config(model, folder):
    import transformers

    name, keys, _ = MODELS[model]
    os.makedirs(folder, exist_ok=True)
    config = getattr(transformers, name)(**keys)
    config.architectures = [name.replace("Config", "ForCausalLM")]
    config.save_pretrained(folder)
    return os.path.join(folder, "config.json")


def titan_config(config_json, out, a, bf16):
    return f"""[job]
dump_folder = "{out}"
[model]
name = "hf"
hf_config = "{config_json}"
[optimizer]
lr = {HYPER['lr']}
eps = {HYPER['eps']}
weight_decay = {HYPER['weight_decay']}
[lr_scheduler]
warmup_steps = 0
[training]
dataset = "kjv"
local_batch_size = {M['batch']}
seq_len = {M['seq']}
steps = {a.warmup + a.steps}
max_norm = {HYPER['max_norm']}
seed = 0
mixed_precision_param = "{'bfloat16' if bf16 else 'float32'}"
[checkpoint]
enable = false
[metrics]
log_freq = 1
enable_jsonl = true
disable_color_printing = true
peak_flops = 1e12
"""


def titan_round(a, model, config_json, bf16):
    tag = f"titan {'bf16' if bf16 else 'f32'}"
    out = os.path.join(a.work, f"{model}_titan_{'bf16' if bf16 else 'f32'}")
    shutil.rmtree(out, ignore_errors=True)
    cfg = out + ".toml"
    with open(cfg, "w") as f:
        f.write(titan_config(config_json, out, a, bf16))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    if a.coretype:
        env["OPENBLAS_CORETYPE"] = a.coretype
    run = subprocess.run([a.titan, "train", "--config", cfg], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    with open(out + ".log", "w") as f:
        f.write(run.stdout)
    if run.returncode != 0:
        return {"name": tag, "error": run.stdout[-2000:]}
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    rows = [r for r in rows if "step_time_s" in r]
    seconds = [r["step_time_s"] for r in rows[a.warmup:]]
    ms = ", ".join(f"{r['step_time_s'] * 1e3:.0f}" for r in rows)
    print(f"  {model} {tag}: steps {ms} ms (first {a.warmup}: warm-up), loss {rows[0]['loss']:.3f} -> "
          f"{rows[-1]['loss']:.3f}", file=sys.stderr, flush=True)
    kernels = [line.split("titan: ", 1)[1] for line in run.stdout.splitlines() if line.startswith("titan: precision")]
    return {"name": tag, "steps": seconds, "kernels": kernels}


def torch_round(a, model, config_json, variant, attn):
    tag = f"torch {variant} ({attn})"
    request = os.path.join(a.work, f"{model}_torch_request.json")
    with open(request, "w") as f:
        json.dump({"threads": a.threads, "warmup": a.warmup, "steps": a.steps, "seed": 0, "variant": variant,
                   "attn_implementation": attn, "config_json": config_json, "batch": M["batch"],
                   "seq": M["seq"]}, f)
    env = dict(os.environ)
    env.setdefault("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    run = subprocess.run([a.python, os.path.join(HERE, "hf_decoders_torch.py"), request], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        return {"name": tag, "error": run.stderr[-2000:]}
    reply = json.loads(lines[-1])
    if "error" in reply:
        return {"name": tag, "error": reply["error"]}
    ms = ", ".join(f"{s * 1e3:.0f}" for s in [reply["first_step_seconds"]] + reply["step_seconds"])
    print(f"  {model} {tag}: steps {ms} ms (first {a.warmup}: warm-up), loss {reply['losses'][0]:.3f} -> {reply['losses'][-1]:.3f}", file=sys.stderr, flush=True)
    return {"name": tag, "steps": reply["step_seconds"], "reply": reply}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--titan", default=os.path.join(ROOT, "build", "titan"))
    p.add_argument("--python", default=os.environ.get("TITAN_PYTHON", sys.executable),
                   help="the interpreter with torch and transformers (default: TITAN_PYTHON, else this one)")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1, help="rounds of every side, each in a fresh process, interleaved")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--work", help="folder for configs and logs (default: a temporary one, removed)")
    a = p.parse_args()
    for flag, value in (("--warmup", a.warmup), ("--steps", a.steps), ("--rounds", a.rounds), ("--threads", a.threads)):
        if value < (0 if flag == "--warmup" else 1):
            sys.exit(f"hf_decoders bench: {flag} must be {'>= 0' if flag == '--warmup' else '>= 1'}, got {value}")
    models = [m for m in a.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        sys.exit(f"hf_decoders bench: unknown --models {unknown}; choose from {list(MODELS)}")
    if not os.access(a.titan, os.X_OK):
        sys.exit(f"hf_decoders bench: no titan command at {a.titan}: build it (cmake --build build --target titan_cli)")
    keep = bool(a.work)
    a.work = os.path.abspath(a.work or tempfile.mkdtemp(prefix="titan_hf_bench_"))
    os.makedirs(a.work, exist_ok=True)
    bf16_cpu = any(f in cpu_flags() for f in ("avx512_bf16", "amx_bf16"))
    # titan's start-up says which OpenBLAS kernels this CPU wants, where OpenBLAS picks older ones.
    a.coretype = os.environ.get("OPENBLAS_CORETYPE", "")
    if not a.coretype:
        probe = subprocess.run([a.titan, "train", "--config", os.path.join(ROOT, "configs", "llama3", "debug.toml"),
                                "--training.steps=1", "--lr_scheduler.warmup_steps=0", "--checkpoint.enable=false",
                                "--metrics.peak_flops=1e12", "--metrics.enable_jsonl=false",
                                f"--job.dump_folder={a.work}/probe"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        if probe.returncode != 0:
            sys.exit(f"hf_decoders bench: titan's one-step probe failed:\n{probe.stdout[-2000:]}")
        m = re.search(r"run with OPENBLAS_CORETYPE=(\w+)", probe.stdout)
        a.coretype = m.group(1) if m else ""

    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    load_before = loadavg()
    # Round by round, every side of every model in turn, so that load from other processes falls
    # on all of them; a side's figure is the median of its timed steps over all rounds.
    results = {model: {} for model in models}
    configs = {model: write_config(model, os.path.join(a.work, model)) for model in models}
    for _ in range(a.rounds):
        for model in models:
            runs = [lambda bf16=bf16: titan_round(a, model, configs[model], bf16)
                    for bf16 in ([False, True] if bf16_cpu else [False])]
            runs += [lambda v=v: torch_round(a, model, configs[model], v, MODELS[model][2]) for v in variants]
            for run in runs:
                r = run()
                side = results[model].setdefault(r["name"], {"name": r["name"], "steps": [], "errors": []})
                side["steps"] += r.get("steps", [])
                side["errors"] += [r["error"]] if "error" in r else []
                side.update({k: v for k, v in r.items() if k in ("kernels", "reply")})
    for sides in results.values():
        for side in sides.values():
            if side["steps"]:
                side["seconds"] = statistics.median(side["steps"])
            elif side["errors"]:
                side["error"] = side["errors"][-1]
    results = {model: list(sides.values()) for model, sides in results.items()}

    tokens = M["batch"] * M["seq"]
    print(f"hf decoders bench: {cpu_name()} ({', '.join(cpu_flags())}), {a.threads} threads each side; load "
          f"average {load_before} before, {loadavg()} after")
    torch_env = next((r["reply"] for rows in results.values() for r in rows if "reply" in r), None)
    titan_kernels = [k for rows in results.values() for r in rows for k in r.get("kernels", [])]
    print(f"titan: OPENBLAS_CORETYPE={a.coretype or '(OpenBLAS default)'}; "
          + ("; ".join(dict.fromkeys(titan_kernels)) or "(its log named no kernels)"))
    if torch_env:
        print(f"torch {torch_env['torch']}, transformers {torch_env['transformers']}: {torch_env['blas']}, oneDNN "
              f"{torch_env['onednn']}, cpu capability {torch_env['cpu_capability']}, optimizer {torch_env['optimizer']}, "
              f"GLIBC_TUNABLES={torch_env['glibc_tunables']}")
    print(f"M shape: dim {M['dim']}, {M['n_layers']} layers, {M['n_heads']} heads / {M['n_kv_heads']} kv of "
          f"{M['dim'] // M['n_heads']}, ffn {M['ffn_dim']}, vocab {M['vocab_size']}, batch {M['batch']} x seq "
          f"{M['seq']}, window {WINDOW}; per round {a.warmup} warm-up + {a.steps} timed steps, {a.rounds} round(s); "
          f"tokens/s of the median timed step")
    verdicts = []
    for model, rows in results.items():
        print(f"\n{model} ({MODELS[model][0].replace('Config', 'ForCausalLM')})")
        for r in rows:
            figure = f"{tokens / r['seconds']:10.1f}" if "seconds" in r else "    failed: " + r["error"].strip()[-300:]
            print(f"  {r['name']:34} {figure}")
        ref = [r for r in rows if r["name"].startswith("torch") and "seconds" in r]
        best = min(ref, key=lambda r: r["seconds"]) if ref else None
        best_f32 = min((r for r in ref if "bf16" not in r["name"]), key=lambda r: r["seconds"], default=None)
        titan = {r["name"]: r for r in rows if r["name"].startswith("titan") and "seconds" in r}
        if best:
            print(f"  best transformers: {best['name']} {tokens / best['seconds']:.1f}")
        if best_f32 and "titan f32" in titan:
            print(f"  titan f32 / best transformers f32 ({best_f32['name']}): "
                  f"{best_f32['seconds'] / titan['titan f32']['seconds']:.2f}x (information)")
        if best and "titan bf16" in titan:
            ratio = best["seconds"] / titan["titan bf16"]["seconds"]
            print(f"  titan bf16 / best transformers ({best['name']}): {ratio:.2f}x")
            partial = "" if set(variants) == set(DEFAULT_VARIANTS) else f" (against {', '.join(variants)} only)"
            verdicts.append(f"target {model}: titan bf16 >= {TARGET}x best transformers: {ratio:.2f}x "
                            f"{'MET' if ratio >= TARGET else 'MISSED'}{partial}")
        else:
            verdicts.append(f"target {model}: titan bf16 >= {TARGET}x best transformers: NOT MEASURED"
                            + ("" if bf16_cpu else " (this CPU has neither avx512_bf16 nor amx_bf16)"))
    print()
    for v in verdicts:
        print(v)
    if keep:
        print(f"configs, titan's logs and metrics in {a.work}")
    else:
        shutil.rmtree(a.work, ignore_errors=True)
    return 0 if all("NOT MEASURED" not in v for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
