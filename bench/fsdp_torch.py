#!/usr/bin/env python3
"""PyTorch 2 FSDP2 on the CPU for bench/fsdp.cpp: the same model, sizes and ranks as titan's FSDP.

Argument: a JSON file {"ranks", "threads", "variant", "seq", "batch_per_rank", "warmup", "steps"}. Starts
`ranks` processes (torch.multiprocessing, gloo over localhost), each with `threads` threads, on
TorchTitan's Llama 3 debugmodel (bench/llama3_torch.py: 6 blocks, dim 256, vocab 2048) sharded
with torch.distributed.fsdp.fully_shard per transformer block and at the root, as TorchTitan does
(reshard_after_forward left at its default); variant "compile" first compiles each block with
torch.compile(fullgraph=True), as TorchTitan does before sharding (the first, warm-up step
compiles). A step: forward, F.cross_entropy, backward,
clip_grad_norm_ 1.0, AdamW (foreach, as for DTensor shards). Then one process alone trains the
unsharded model on rank 0's batch, as titan's "one rank" figure does.

Peak memory per rank is the resident high-water mark over the timed steps (reset after warm-up)
less the resident size before the model was built (torch and its distributed modules already
loaded), the largest over ranks.

Prints one JSON line on stdout: {environment(), "ranks", "variant", "step_seconds",
"first_step_seconds", "one_rank_step_seconds", "rss_growth", "one_rank_rss_growth"} (step times and
growth: the slowest and largest rank's), or {"error"}. Progress goes to stderr.
"""
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def train(request, torch, rank, shard, fully_shard=None):
    """(mean seconds per timed step, seconds of the first step, resident growth) of this rank."""
    import torch.nn.functional as F

    import llama3_torch
    from torch_reference import reset_peak_rss, status_bytes

    args = llama3_torch.ModelArgs(dim=256, n_layers=6, n_heads=16, n_kv_heads=16, vocab_size=2048,
                                  max_seq_len=request["seq"])
    gen = torch.Generator().manual_seed(2 + rank)
    tokens = torch.randint(0, args.vocab_size, (request["batch_per_rank"], request["seq"] + 1), generator=gen)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    baseline = status_bytes("VmRSS")
    model = llama3_torch.Transformer(args)
    model.init_weights(torch.Generator().manual_seed(1))
    if request["variant"].startswith("compile"):
        for i, block in enumerate(model.layers):
            model.layers.register_module(str(i), torch.compile(block, fullgraph=True))
    if shard:
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            foreach=True)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs).flatten(0, 1), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    start = time.perf_counter()
    for _ in range(request["warmup"]):
        step()
    first = time.perf_counter() - start
    reset_peak_rss()
    if shard:
        torch.distributed.barrier()
    start = time.perf_counter()
    for _ in range(request["steps"]):
        step()
    if shard:
        torch.distributed.barrier()
    return (time.perf_counter() - start) / request["steps"], first, status_bytes("VmHWM") - baseline


def rank_main(rank, request, port, queue):
    """One rank of FSDP2, or (port None) the one unsharded process; rank 0 puts the figures."""
    os.environ["OMP_NUM_THREADS"] = str(request["threads"])
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(request["threads"])
    if port is None:
        seconds, _, growth = train(request, torch, 0, shard=False)
        queue.put({"one_rank_step_seconds": seconds, "one_rank_rss_growth": growth})
        return
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=request["ranks"])
    try:
        figures = train(request, torch, rank, shard=True, fully_shard=fully_shard)
        worst = torch.tensor([float(f) for f in figures], dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        if rank == 0:
            queue.put({"step_seconds": worst[0].item(), "first_step_seconds": worst[1].item(),
                       "rss_growth": worst[2].item()})
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    from torch_reference import environment, start_torch

    request, torch = start_torch()
    if torch is None:
        return 0
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    try:
        mp.start_processes(rank_main, args=(request, free_port(), queue), nprocs=request["ranks"],
                           start_method="spawn")
        sharded = queue.get()
        mp.start_processes(rank_main, args=(request, None, queue), nprocs=1, start_method="spawn")
    except Exception as e:  # noqa: BLE001 -- a rank's failure arrives as ProcessRaisedException
        print(json.dumps({"error": f"{type(e).__name__}: {str(e)[:500]}"}))
        return 0
    print(json.dumps({**environment(torch), "ranks": request["ranks"], "variant": request["variant"], **sharded,
                      **queue.get()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
