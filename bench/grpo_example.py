#!/usr/bin/env python3
"""GRPO's worked example (docs/training.md#grpo), from data to verdict, deterministic from the seed.

    bench/grpo_example.py [--titan build/titan]
    OPENBLAS_CORETYPE=SkylakeX bench/grpo_example.py   # where OpenBLAS predates the CPU (docs/training.md)

1. scripts/make_task_data.py writes two-digit additions ("12+34=" -> "46") into
   outputs/grpo_example/data: sft.jsonl, prompts.jsonl (GRPO's) and eval.jsonl (held out).
2. `titan train --config configs/sft/addition.toml` fine-tunes a small Llama on sft.jsonl, stopped
   early on purpose so that it solves a modest share of the held-out sums.
3. `titan train --config configs/grpo/addition.toml` runs GRPO from the SFT's final weights.

It prints the CPU and OpenBLAS kernels, each job's wall time, the held-out greedy accuracy after
SFT (= before GRPO) and after GRPO, the curve (held-out accuracy at each evaluation and the mean
training reward of the steps before it), the mean training reward of GRPO's first and last
WINDOW steps, and PASS or FAIL against issue 47's thresholds: held-out accuracy up by at least
20 points, mean training reward up by at least 0.25. Both jobs' logs are in outputs/grpo_example
(sft.log, grpo.log). Exit status: 0 PASS, 1 FAIL, 2 a job failed. Only the standard library.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path("outputs/grpo_example")  # the configs' paths are relative to the repository root
SFT_CONFIG, GRPO_CONFIG = Path("configs/sft/addition.toml"), Path("configs/grpo/addition.toml")
# The data's arguments; the configs read the files from OUT / "data".
DATA_ARGS = ["--task", "addition", "--digits", "2", "--seed", "0", "--sft", "4000", "--prompts", "1000",
             "--eval", "200"]
WINDOW = 10  # steps averaged for the first and last mean training reward: one step's 128 samples are noisy
MIN_ACCURACY_GAIN, MIN_REWARD_GAIN = 0.20, 0.25  # issue 47's thresholds


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def run_job(titan, config, log_path):
    """Runs one `titan train`, its output into log_path; returns (log text, seconds)."""
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        rc = subprocess.call([titan, "train", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - t0
    text = Path(log_path).read_text()
    if rc != 0:
        sys.stdout.write(text[-3000:])
        print(f"FAIL: titan train --config {config} exited with {rc}; its log is {log_path}")
        sys.exit(2)
    return text, seconds


def mean(values):
    return sum(values) / len(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--titan", default="build/titan", help="the titan binary (default build/titan)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # in order with the child processes' lines
    titan = str(Path(args.titan).resolve())  # relative to where it is run from
    os.chdir(ROOT)
    if not os.access(titan, os.X_OK):
        print(f"FAIL: {titan} is no executable; build it (cmake --build build --target titan_cli) or pass --titan")
        sys.exit(2)

    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}")
    subprocess.check_call([sys.executable, "scripts/make_task_data.py", *DATA_ARGS, "--out", str(OUT / "data")])
    # A run resumes from (or, finished, stops at) a checkpoint in its own folder and reads
    # initial_load_path only when there is none: both start fresh.
    for job in ("sft", "grpo"):
        shutil.rmtree(OUT / job, ignore_errors=True)

    sft_log, sft_seconds = run_job(titan, SFT_CONFIG, OUT / "sft.log")
    kernels = re.search(r"precision \S+ \(([^)]*)\)", sft_log)
    print(f"kernels: {kernels.group(1) if kernels else 'unknown'}")
    final_loss = re.findall(r"final loss (\S+)", sft_log)[-1]
    print(f"SFT ({SFT_CONFIG}): {sft_seconds:.0f} s, final loss {final_loss}")
    grpo_log, grpo_seconds = run_job(titan, GRPO_CONFIG, OUT / "grpo.log")
    print(f"GRPO ({GRPO_CONFIG}): {grpo_seconds:.0f} s")

    before = re.search(r"held-out greedy accuracy before training (\S+)", grpo_log)
    rows = [json.loads(line) for line in (OUT / "grpo" / "metrics.jsonl").read_text().splitlines()]
    steps = [row["step"] for row in rows]
    if not before or steps != list(range(1, len(rows) + 1)) or "eval/accuracy" not in rows[-1] or len(rows) < 2 * WINDOW:
        print("FAIL: the GRPO run needs grpo.eval_every > 0 with training.steps a multiple of it, "
              f"metrics.log_freq = 1 and at least {2 * WINDOW} steps, to be measured")
        sys.exit(2)
    accuracy_before, accuracy_after = float(before.group(1)), rows[-1]["eval/accuracy"]
    rewards = [row["reward/mean"] for row in rows]

    print("GRPO's curve: step, held-out greedy accuracy, mean training reward of the steps since the last evaluation")
    print(f"  {0:4d}  {accuracy_before:.3f}")
    last = 0
    for row in rows:
        if "eval/accuracy" in row:
            print(f"  {row['step']:4d}  {row['eval/accuracy']:.3f}  {mean(rewards[last:row['step']]):.3f}")
            last = row["step"]

    reward_first, reward_last = mean(rewards[:WINDOW]), mean(rewards[-WINDOW:])
    accuracy_gain, reward_gain = accuracy_after - accuracy_before, reward_last - reward_first
    print(f"held-out greedy accuracy: {accuracy_before:.3f} after SFT, {accuracy_after:.3f} after GRPO "
          f"({100 * accuracy_gain:+.1f} points; needs >= {100 * MIN_ACCURACY_GAIN:+.0f})")
    print(f"mean training reward: {reward_first:.3f} over GRPO's first {WINDOW} steps, {reward_last:.3f} over its "
          f"last {WINDOW} ({reward_gain:+.3f}; needs >= {MIN_REWARD_GAIN:+.2f})")
    passed = accuracy_gain >= MIN_ACCURACY_GAIN - 1e-9 and reward_gain >= MIN_REWARD_GAIN - 1e-9
    print("PASS" if passed else "FAIL")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
