#!/usr/bin/env python3
"""The PyTorch reference of the GRPO benchmark: TRL's GRPOTrainer on the CPU, set as titan's GRPO.

Runs in .venv-rl (scripts/setup.sh rl: torch 2.15, transformers 5.24, trl 1.16). Given an HF
Llama folder and {"prompt", "answer"} JSONL files, it trains --steps GRPO steps of
--prompts-per-step prompts times --group-size samples each, rewarding an exact answer, and
prints one JSON line on stdout (progress and TRL's logs go to stderr):

  seconds_per_step           median wall time of a step (rollout, rewards, loss, backward,
                             optimizer), steps after the first; step_seconds lists them all
  rollout_tokens_per_second  completion tokens sampled (each up to and with its eos, as TRL keeps
                             them) / seconds in TRL's rollout (HF generate), steps after the first
  reward_per_step            TRL's mean reward of each step's rollouts
  rollout_digest             a hash of every completion's token ids: equal runs sampled alike
  eval_accuracy_before/after greedy accuracy on --eval (the same exact-match reward) before the
                             first step and after the last
  settings                   what titan's GRPO config has to match

What matches titan's GRPO (issue 47): one optimizer step per batch of rollouts (num_iterations 1,
no mini-batches), no KL term (beta 0, no reference model), the per-token clipped ratio with
separate low and high epsilon (DAPO), the loss summed over the valid completion tokens of the
whole batch and divided by their count (loss_type "dapo"), sampling at --temperature with no top-k
or top-p. The defaults are titan's (rl::PolicyLossOptions): both epsilons 0.2. The advantage is r - mean of
the group, divided by the group's unbiased std + 1e-4 with --scale-rewards group (TRL has no
population-std option: titan's unbiased_std, whose eps is 1e-6), undivided with none. AdamW with the
betas, eps, weight decay and gradient clipping given, at a constant learning rate. bf16 is off
unless --bf16 (autocast on the CPU).

Threads: on the 2-core host shared with other jobs, a 156k-parameter model stepped in 0.07 s
with --threads 1 and 0.8-4 s with --threads 2 (OpenMP's threads waiting on each other for tiny
GEMMs): run the reference at each thread count and compare titan with the best.

The reward ("exact" with an empty marker in titan): the completion from its first non-blank
character to the end of that line, trimmed, equals the answer, trimmed: 1, else 0.

  grpo_trl.py --self-test   makes a tiny random model and sums (bench/grpo_fixtures.py) in a
                            temporary folder, runs 3 steps twice in child processes and checks
                            their JSON lines, the same seed's two runs alike, and the reward
                            on titan's own test cases.
"""
import argparse
import contextlib
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# titan's whitespace (src/titan/rl/reward.cpp): str.strip() would also drop Unicode spaces.
WHITESPACE = " \t\r\n\f\v"


def exact_reward(completion, answer):
    """titan's "exact" reward without a marker: from the completion's first non-blank character to
    the end of that line, trimmed, equals the answer, trimmed."""
    first_line = completion.lstrip(WHITESPACE).split("\n", 1)[0]
    return 1.0 if first_line.strip(WHITESPACE) == answer.strip(WHITESPACE) else 0.0


def read_jsonl(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for i, row in enumerate(rows):
        if not isinstance(row.get("prompt"), str) or not isinstance(row.get("answer"), str):
            sys.exit(f"grpo_trl: {path} line {i + 1} needs string fields \"prompt\" and \"answer\": {row}")
    return rows


def greedy_accuracy(model, tokenizer, rows, max_new_tokens, torch, batch=64):
    """The share of rows whose greedy completion earns the reward, generated in left-padded batches."""
    was_training = model.training
    model.eval()
    tokenizer.padding_side = "left"
    correct = 0
    with torch.no_grad():
        for start in range(0, len(rows), batch):
            chunk = rows[start:start + batch]
            inputs = tokenizer([r["prompt"] for r in chunk], return_tensors="pt", padding=True)
            out = model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            texts = tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
            correct += sum(exact_reward(t, r["answer"]) for t, r in zip(texts, chunk))
    model.train(was_training)
    return correct / len(rows)


def after_first(values):
    """The steps a figure is taken over: all but the first (warm-up), or the only one."""
    return values[1:] if len(values) > 1 else values


def run(args):
    # Before torch loads OpenMP and MKL, so their pools start at this size too.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    torch.set_num_threads(args.threads)
    import datasets
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    sys.path.insert(0, HERE)
    from torch_reference import environment

    train_rows, eval_rows = read_jsonl(args.prompts), read_jsonl(args.eval)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:  # as GRPOTrainer does: padding is masked, any id serves
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    accuracy_before = greedy_accuracy(model, tokenizer, eval_rows, args.max_new_tokens, torch)

    digest = hashlib.sha256()

    class TimedGRPOTrainer(GRPOTrainer):
        """Times each rollout (HF generate), counts the completion tokens it returns and hashes them."""
        rollouts = []

        def _generate_single_turn(self, *a, **k):
            start = time.perf_counter()
            out = super()._generate_single_turn(*a, **k)
            self.rollouts.append((sum(len(ids) for ids in out[0]), time.perf_counter() - start))
            digest.update(json.dumps(out[0]).encode())
            return out

    class StepClock(TrainerCallback):
        """Wall time from one optimizer step's end to the next's (the first: from training's start)."""
        def __init__(self):
            self.seconds, self.last = [], None

        def on_train_begin(self, *a, **k):
            self.last = time.perf_counter()

        def on_step_end(self, *a, **k):
            now = time.perf_counter()
            self.seconds.append(now - self.last)
            self.last = now

    batch = args.prompts_per_step * args.group_size
    config = GRPOConfig(
        output_dir=args.output_dir, use_cpu=True, bf16=args.bf16, fp16=False, seed=args.seed,
        data_seed=args.seed, max_steps=args.steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, steps_per_generation=1, num_generations=args.group_size,
        num_iterations=1, beta=0.0, loss_type="dapo", epsilon=args.epsilon, epsilon_high=args.epsilon_high,
        scale_rewards=args.scale_rewards, mask_truncated_completions=False,
        max_completion_length=args.max_new_tokens, temperature=args.temperature, top_p=1.0, top_k=0,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=args.beta1, adam_beta2=args.beta2, adam_epsilon=args.adam_eps,
        weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm, activation_checkpointing=False,
        remove_unused_columns=False, logging_steps=1, save_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_num_workers=0, dataloader_pin_memory=False)

    def exact(completions, answer, **_):
        return [exact_reward(c, a) for c, a in zip(completions, answer)]

    clock = StepClock()
    trainer = TimedGRPOTrainer(model=model, reward_funcs=exact, args=config, processing_class=tokenizer,
                               train_dataset=datasets.Dataset.from_list(train_rows), callbacks=[clock])
    # The Trainer prints its log lines on stdout; the JSON line is this script's only stdout.
    with contextlib.redirect_stdout(sys.stderr):
        trainer.train()
    accuracy_after = greedy_accuracy(model, tokenizer, eval_rows, args.max_new_tokens, torch)

    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    rollouts = after_first(trainer.rollouts)
    result = {
        "framework": "trl GRPOTrainer",
        "trl": trl.__version__, "transformers": transformers.__version__, **environment(torch),
        "model": os.path.abspath(args.model),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": args.steps, "group_size": args.group_size, "prompts_per_step": args.prompts_per_step,
        "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "lr": args.lr,
        "seed": args.seed, "bf16": args.bf16,
        "seconds_per_step": statistics.median(after_first(clock.seconds)),
        "step_seconds": clock.seconds,
        "rollout_tokens_per_second": sum(t for t, _ in rollouts) / sum(s for _, s in rollouts),
        "rollout_tokens_per_step": [t for t, _ in trainer.rollouts],
        "rollout_seconds_per_step": [s for _, s in trainer.rollouts],
        "reward_per_step": [entry["reward"] for entry in logs],
        "completion_length_per_step": [entry["completions/mean_length"] for entry in logs],
        "rollout_digest": digest.hexdigest()[:16],
        "eval_accuracy_before": accuracy_before, "eval_accuracy_after": accuracy_after,
        "eval_prompts": len(eval_rows),
        "settings": {
            "num_iterations": 1, "beta": 0.0, "loss_type": "dapo (sum over valid tokens / their global count)",
            "epsilon_low": args.epsilon, "epsilon_high": args.epsilon_high,
            "advantage": ("(r - group mean) / (group unbiased std + 1e-4)" if args.scale_rewards == "group"
                          else "r - group mean"),
            "top_k": None, "top_p": 1.0, "optimizer": "AdamW", "betas": [args.beta1, args.beta2],
            "adam_eps": args.adam_eps, "weight_decay": args.weight_decay, "max_grad_norm": args.max_grad_norm,
            "lr_schedule": "constant", "reward": "exact: the completion's first non-blank line, trimmed == the answer, trimmed"},
    }
    print(json.dumps(result))


def self_test():
    """Makes the fixtures, runs 3 steps twice as a user would, and checks the JSON lines they print:
    one line, positive timings, a value per step, and the same rollouts from the same seed."""
    with tempfile.TemporaryDirectory() as tmp:
        fixtures = os.path.join(HERE, "grpo_fixtures.py")
        subprocess.run([sys.executable, fixtures, "model", os.path.join(tmp, "model")], check=True,
                       stdout=sys.stderr)
        subprocess.run([sys.executable, fixtures, "addition", tmp, "--train", "256", "--eval", "64"], check=True,
                       stdout=sys.stderr)
        command = [sys.executable, os.path.abspath(__file__), "--model", os.path.join(tmp, "model"),
                   "--prompts", os.path.join(tmp, "prompts.jsonl"), "--eval", os.path.join(tmp, "eval.jsonl"),
                   "--group-size", "4", "--prompts-per-step", "4", "--steps", "3", "--max-new-tokens", "6",
                   "--threads", "2", "--seed", "1"]
        outs = [subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout for _ in range(2)]
    failures = []
    # titan's own cases (tests/unit/test_reward.cpp, RewardExact without a marker).
    cases = [("579", "579", 1.0), ("  579 \n123+1=124", "579", 1.0), ("5790", "579", 0.0), ("", "579", 0.0),
             ("\t x y \r\nz", "x y", 1.0), ("\n\n  13\n14", " 13\n", 1.0), ("13\u00a0", "13", 0.0)]
    for completion, answer, want in cases:
        if exact_reward(completion, answer) != want:
            failures.append(f"exact_reward({completion!r}, {answer!r}) is not {want}")
    results = []
    for out in outs:
        lines = out.splitlines()
        if len(lines) != 1:
            failures.append(f"expected one line on stdout, got {len(lines)}: {out[:500]!r}")
            continue
        print(lines[0])
        result = json.loads(lines[0])
        results.append(result)
        for key in ("seconds_per_step", "rollout_tokens_per_second"):
            if not (isinstance(result.get(key), float) and math.isfinite(result[key]) and result[key] > 0):
                failures.append(f"{key} is {result.get(key)!r}, expected a positive number")
        for key in ("step_seconds", "reward_per_step", "rollout_tokens_per_step"):
            if len(result.get(key, [])) != 3:
                failures.append(f"{key} is {result.get(key)!r}, expected one value per step (3)")
        rewards = result.get("reward_per_step", []) + [result.get("eval_accuracy_before"),
                                                       result.get("eval_accuracy_after")]
        if not all(isinstance(r, float) and 0.0 <= r <= 1.0 for r in rewards):
            failures.append(f"rewards and accuracies {rewards} are not all in [0, 1]")
    same = ("rollout_digest", "rollout_tokens_per_step", "reward_per_step", "eval_accuracy_after")
    if len(results) == 2 and any(results[0].get(k) != results[1].get(k) for k in same):
        failures.append("two runs from seed 1 differ: " +
                        "; ".join(f"{k} {results[0].get(k)} vs {results[1].get(k)}" for k in same))
    for failure in failures:
        print(f"grpo_trl self-test: {failure}", file=sys.stderr)
    print(f"{int(not failures)} passed, {int(bool(failures))} failed")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true", help="run the 3-step check on a tiny model")
    parser.add_argument("--model", help="Hugging Face Llama folder (config.json, safetensors, tokenizer)")
    parser.add_argument("--prompts", help="training JSONL, lines {\"prompt\", \"answer\"}")
    parser.add_argument("--eval", help="held-out JSONL, lines {\"prompt\", \"answer\"}")
    parser.add_argument("--group-size", type=int, default=8, help="samples per prompt (G)")
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (default: float32)")
    parser.add_argument("--epsilon", type=float, default=0.2, help="low clip: ratio >= 1 - epsilon")
    parser.add_argument("--epsilon-high", type=float, default=0.2,
                        help="high clip: ratio <= 1 + this (DAPO's paper: 0.28)")
    parser.add_argument("--scale-rewards", choices=("group", "none"), default="group",
                        help="group: divide the advantage by the group's unbiased std + 1e-4")
    parser.add_argument("--beta1", type=float, default=0.9)
    parser.add_argument("--beta2", type=float, default=0.95)
    parser.add_argument("--adam-eps", type=float, default=1e-8)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--output-dir", default=None, help="TRL's output folder (default: a temporary one)")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    missing = [name for name in ("model", "prompts", "eval") if getattr(args, name) is None]
    if missing:
        parser.error("needs " + ", ".join(f"--{name}" for name in missing) + " (or --self-test)")
    if args.group_size < 2:
        parser.error(f"--group-size is {args.group_size}; group-normalised advantages need at least 2")
    if args.output_dir is not None:
        run(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        args.output_dir = tmp
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
