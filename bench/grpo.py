#!/usr/bin/env python3
"""GRPO benchmark: titan's GRPO against TRL's GRPOTrainer on the same CPU, model, weights, task,
group size and steps, in one run (issue 47's target: titan's step >= 2x faster at equal or better
reward).

  .venv/bin/python bench/grpo.py [--steps 100 --sft-steps 400 --threads 1 --bf16 --work DIR]

What it does, all offline and from fixed seeds:
  1. two-digit sums (scripts/make_task_data.py): SFT pairs, GRPO prompts and held-out prompts;
     the byte-level tokenizer of bench/grpo_fixtures.py (every digit one token, bos and eos);
  2. titan SFT of a 2-layer Llama (llama3 debugmodel's width, 1.8M parameters) to a modest
     accuracy, converted to a Hugging Face folder (`titan convert --to hf`) for TRL;
  3. from those same weights, --steps GRPO steps in titan and in TRL (bench/grpo_trl.py in
     .venv-rl: `make deps-rl`), with the same settings: prompts x group size, max_new_tokens,
     temperature 1, no KL, the DAPO token-sum loss, clip 0.2, advantages over the group's unbiased
     std, AdamW (0.9, 0.95, no weight decay) at a constant learning rate, gradient clip 1;
  4. per thread count, each side's median seconds per step (steps after the first), rollout
     tokens/s, mean reward of the last 10 steps, held-out greedy accuracy before and after; then
     titan's best against TRL's best and their ratios.
titan runs f32 (OpenBLAS, with OPENBLAS_CORETYPE set where OpenBLAS would pick older kernels, as
every titan benchmark does) and, with --bf16, bf16 matrix products; TRL f32 (and bf16 autocast with
--bf16). Rewards differ between the two by sampling noise alone: the draws are not the same.
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
sys.path.insert(0, HERE)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def run(cmd, env=None, log=None):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log:
        with open(log, "w") as f:
            f.write(out.stdout)
    if out.returncode != 0:
        sys.exit(f"grpo bench: {' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}")
    return out.stdout


def titan_env(titan, threads, coretype):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


MODEL = """[model]
name = "llama3"
flavor = "debugmodel"
n_layers = 2
vocab_size = 258
tokenizer_path = "{tok}"
[metrics]
log_freq = 1
peak_flops = 1e11
enable_jsonl = true
"""


def sft_config(a, w):
    return MODEL.format(tok=w["tok"]) + f"""[job]
dump_folder = "{w['sft']}"
[optimizer]
lr = 1e-3
weight_decay = 0.0
[lr_scheduler]
warmup_steps = 20
min_lr_factor = 1.0
[training]
objective = "sft"
dataset_path = "{w['data']}/sft.jsonl"
local_batch_size = 32
seq_len = 64
steps = {a.sft_steps}
seed = 0
[checkpoint]
enable = true
folder = "checkpoint"
interval = 100000
last_save_model_only = true
"""


def grpo_config(a, w, out, bf16):
    return MODEL.format(tok=w["tok"]) + f"""[job]
dump_folder = "{out}"
[optimizer]
lr = {a.lr}
weight_decay = 0.0
[lr_scheduler]
warmup_steps = 0
min_lr_factor = 1.0
[training]
objective = "grpo"
local_batch_size = {min(64, a.prompts * a.group)}
seq_len = {8 + a.max_new_tokens}
steps = {a.steps}
seed = 0
max_norm = 1.0
mixed_precision_param = "{'bfloat16' if bf16 else 'float32'}"
[checkpoint]
enable = true
initial_load_path = "{w['sft_step']}"
interval = 100000
[grpo]
prompts_path = "{w['data']}/prompts.jsonl"
eval_path = "{w['data']}/eval.jsonl"
eval_every = {a.steps}
prompts_per_step = {a.prompts}
group_size = {a.group}
max_new_tokens = {a.max_new_tokens}
temperature = 1.0
advantage_norm = "unbiased_std"
"""


def titan_grpo(a, w, titan, threads, coretype, bf16):
    name = f"titan_{'bf16' if bf16 else 'f32'}_t{threads}"
    out = os.path.join(w["root"], name)
    shutil.rmtree(out, ignore_errors=True)
    cfg = os.path.join(w["root"], name + ".toml")
    with open(cfg, "w") as f:
        f.write(grpo_config(a, w, out, bf16))
    log = run([titan, "train", "--config", cfg], env=titan_env(titan, threads, coretype),
              log=os.path.join(w["root"], name + ".log"))
    before = float(re.search(r"held-out greedy accuracy before training ([0-9.]+)", log).group(1))
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    rows = [r for r in rows if "reward/mean" in r]
    return {"name": name, "seconds_per_step": statistics.median(r["step_time_s"] for r in rows[1:]),
            "rollout_tokens_per_second": statistics.median(r["rollout/tokens_per_s"] for r in rows[1:]),
            "reward_last_10": statistics.mean(r["reward/mean"] for r in rows[-10:]),
            "reward_per_step": [round(r["reward/mean"], 4) for r in rows],
            "eval_accuracy_before": before, "eval_accuracy_after": rows[-1].get("eval/accuracy")}


def trl_grpo(a, w, threads, bf16):
    python = os.path.join(ROOT, ".venv-rl", "bin", "python")
    if not os.path.exists(python):
        sys.exit("grpo bench: TRL's venv is missing: run `make deps-rl` (scripts/setup.sh rl) first")
    cmd = [python, os.path.join(HERE, "grpo_trl.py"), "--model", w["hf"], "--prompts", f"{w['data']}/prompts.jsonl",
           "--eval", f"{w['data']}/eval.jsonl", "--group-size", str(a.group), "--prompts-per-step", str(a.prompts),
           "--steps", str(a.steps), "--max-new-tokens", str(a.max_new_tokens), "--temperature", "1.0",
           "--lr", str(a.lr), "--seed", "0", "--threads", str(threads), "--weight-decay", "0.0",
           "--output-dir", os.path.join(w["root"], f"trl_t{threads}")] + (["--bf16"] if bf16 else [])
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit(f"grpo bench: TRL failed:\n{out.stderr[-3000:]}")
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return {"name": f"trl_{'bf16' if bf16 else 'f32'}_t{threads}", "seconds_per_step": d["seconds_per_step"],
            "rollout_tokens_per_second": d["rollout_tokens_per_second"],
            "reward_last_10": statistics.mean(d["reward_per_step"][-10:]),
            "reward_per_step": [round(r, 4) for r in d["reward_per_step"]],
            "eval_accuracy_before": d["eval_accuracy_before"], "eval_accuracy_after": d["eval_accuracy_after"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--titan", default=os.path.join(ROOT, "build", "titan"))
    p.add_argument("--work", help="folder for the runs (default: a temporary one, removed)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--sft-steps", type=int, default=400)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", default="1", help="thread counts to run each side at, e.g. 1,2 (2 threads on 2 shared cores ran TRL at 4-6 s a step)")
    p.add_argument("--bf16", action="store_true", help="also bf16 (titan's bf16 products, TRL's autocast)")
    a = p.parse_args()
    root = a.work or tempfile.mkdtemp(prefix="titan_grpo_bench_")
    os.makedirs(root, exist_ok=True)
    w = {"root": root, "data": os.path.join(root, "data"), "tok": os.path.join(root, "tok"),
         "sft": os.path.join(root, "sft"), "hf": os.path.join(root, "hf")}
    run([sys.executable, os.path.join(ROOT, "scripts", "make_task_data.py"), "--task", "addition", "--digits", "2",
         "--out", w["data"], "--sft", "6000", "--prompts", "2000", "--eval", "200"])
    os.makedirs(w["tok"], exist_ok=True)
    from grpo_fixtures import save_tokenizer
    save_tokenizer(w["tok"])

    # titan's start-up says which OpenBLAS kernels this CPU wants, where OpenBLAS picks older ones.
    sft_cfg = os.path.join(root, "sft.toml")
    with open(sft_cfg, "w") as f:
        f.write(sft_config(a, w))
    shutil.rmtree(w["sft"], ignore_errors=True)
    probe = run([a.titan, "train", "--config", sft_cfg, "--training.steps=1", "--lr_scheduler.warmup_steps=0",
                  "--checkpoint.enable=false"])
    m = re.search(r"run with OPENBLAS_CORETYPE=(\w+)", probe)
    coretype = os.environ.get("OPENBLAS_CORETYPE") or (m.group(1) if m else "")
    shutil.rmtree(w["sft"], ignore_errors=True)
    run([a.titan, "train", "--config", sft_cfg], env=titan_env(a.titan, 1, coretype), log=os.path.join(root, "sft.log"))
    w["sft_step"] = os.path.join(w["sft"], "checkpoint", f"step-{a.sft_steps}")
    shutil.rmtree(w["hf"], ignore_errors=True)
    run([a.titan, "convert", "--to", "hf", "--checkpoint", w["sft_step"], "--out", w["hf"]])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(w["tok"], name), w["hf"])

    threads = [int(t) for t in a.threads.split(",")]
    precisions = [False, True] if a.bf16 else [False]
    results = []
    for bf16 in precisions:
        for t in threads:
            results.append(titan_grpo(a, w, a.titan, t, coretype, bf16))
            results.append(trl_grpo(a, w, t, bf16))
    print(f"grpo bench: {cpu_name()}; titan OPENBLAS_CORETYPE={coretype or '(OpenBLAS default)'}; "
          f"{a.prompts} prompts x {a.group} completions of up to {a.max_new_tokens} tokens, {a.steps} steps from "
          f"the same SFT weights ({a.sft_steps} titan SFT steps)")
    print(f"{'run':16} {'s/step':>8} {'rollout tok/s':>14} {'reward (last 10)':>17} {'held-out before':>16} "
          f"{'after':>6}")
    for r in results:
        print(f"{r['name']:16} {r['seconds_per_step']:8.3f} {r['rollout_tokens_per_second']:14.0f} "
              f"{r['reward_last_10']:17.3f} {r['eval_accuracy_before']:16.3f} {r['eval_accuracy_after']:6.3f}")
    for bf16 in precisions:
        tag = "bf16" if bf16 else "f32"
        best_titan = min((r for r in results if r["name"].startswith("titan_" + tag)), key=lambda r: r["seconds_per_step"])
        best_trl = min((r for r in results if r["name"].startswith("trl_" + tag)), key=lambda r: r["seconds_per_step"])
        print(f"{tag}: titan {best_titan['name']} {best_titan['seconds_per_step']:.3f} s/step vs TRL {best_trl['name']} "
              f"{best_trl['seconds_per_step']:.3f}: {best_trl['seconds_per_step'] / best_titan['seconds_per_step']:.2f}x "
              f"(target 2x); rollout {best_titan['rollout_tokens_per_second'] / best_trl['rollout_tokens_per_second']:.2f}x; "
              f"reward {best_titan['reward_last_10']:.3f} vs {best_trl['reward_last_10']:.3f}")
    print(json.dumps({"results": results}))
    if not a.work:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
