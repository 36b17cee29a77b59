"""diffusers' FLUX schedule, the reference of tests/unit/test_flux_sampler.cpp.

usage: flux_schedule_reference.py --out FILE
Writes a JSON list of {"config", "steps", "image_seq_len", "mu", "sigmas", "timesteps"}: the
scheduler's scheduler_config.json, what FluxPipeline hands the scheduler (sigmas
linspace(1, 1/n, n), mu by calculate_shift from the packed token count) and the scheduler's sigmas
(n + 1, ending at 0) and timesteps (n, sigma x 1000). FLUX.1-dev's config (dynamic shifting) for
step counts and image sizes on both sides of the shift's end points (256 and 4096 tokens) and past
them; FLUX.1-schnell's (no shifting), a fixed shift of 3 and the linear dynamic shift for a few.
"""
import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.flux.pipeline_flux import calculate_shift

DEV = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
           base_image_seq_len=256, max_image_seq_len=4096)
SCHNELL = dict(DEV, shift=1.0, use_dynamic_shifting=False)
CASES = [(DEV, steps, seq_len) for steps, seq_len in
         [(1, 256), (2, 16), (4, 256), (4, 1024), (20, 64), (28, 4096), (28, 1024), (50, 4608), (7, 6000)]]
CASES += [(SCHNELL, 4, 1024), (SCHNELL, 1, 4096), (dict(SCHNELL, shift=3.0), 10, 256),
          (dict(DEV, time_shift_type="linear"), 12, 2048)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for config, steps, seq_len in CASES:
            scheduler = FlowMatchEulerDiscreteScheduler(**config)
            scheduler.save_config(tmp)
            saved = json.loads((Path(tmp) / "scheduler_config.json").read_text())
            mu = calculate_shift(seq_len, 256, 4096, 0.5, 1.15)
            scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
            out.append({"config": saved, "steps": steps, "image_seq_len": seq_len, "mu": mu,
                        "sigmas": scheduler.sigmas.tolist(), "timesteps": scheduler.timesteps.tolist()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
