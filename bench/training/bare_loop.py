"""The training step without Lightning: the loop a user would write around the same module.
`bench perf` compares it with the Lightning step; a sweep's cost plan calibrates on it."""

from __future__ import annotations

import time


class BareLoop:
    """The 30-line loop a user would write: same module, generator, optimizer, scheduler, clip."""

    def __init__(self, module, task, device):
        import torch

        self.module, self.task, self.device, self.step = module, task, device, 0
        optim = module.configure_optimizers()
        self.opt, self.sched = optim["optimizer"], optim["lr_scheduler"]["scheduler"]
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.clip = module.train_config.grad_clip
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def run(self, n: int) -> tuple[list[float], float]:
        """Train n steps; return (seconds of each step, seconds spent drawing batches)."""
        import torch

        module = self.module.train()
        self.sync()
        durations, gen = [], 0.0
        for _ in range(n):
            t = time.perf_counter()
            batch = self.task.train_batch(self.step, self.device)
            gen += time.perf_counter() - t
            loss = module.loss(batch)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if self.clip:
                torch.nn.utils.clip_grad_norm_(self.params, self.clip)
            self.opt.step()
            self.sched.step()
            self.step += 1
            self.sync()
            durations.append(time.perf_counter() - t)
        return durations, gen
