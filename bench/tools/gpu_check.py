"""GPU parity and speed: our mixers against the library layers they mirror, on the same weights.

    python -m bench.tools.gpu_check [--batch 16] [--seq-len 256] [--d-model 256]

For Mamba (mamba_ssm.Mamba), Gated DeltaNet (fla.layers.GatedDeltaNet) and RWKV-7
(fla.layers.RWKV7Attention) it loads one state dict into our module and into the library layer,
runs both on CUDA in float32, and prints the largest output and input-gradient differences of
our fused and reference paths against the library, with the forward+backward time of each.
Needs CUDA, flash-linear-attention and mamba-ssm (`pip install -e .[gpu,dev]`).
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

from architectures.gated_deltanet import GatedDeltaNetConfig
from architectures.mamba import MambaConfig
from architectures.rwkv import RWKV7Config


def library_layers(d: int):
    """(name, our config, library layer factory, how to take the output) per mixer."""
    from fla.layers import GatedDeltaNet, RWKV7Attention
    from mamba_ssm import Mamba

    return [
        ("mamba", MambaConfig(d_model=d, d_state=16, d_conv=4, expand=2),
         lambda: Mamba(d_model=d, d_state=16, d_conv=4, expand=2), lambda out: out),
        ("gated_deltanet", GatedDeltaNetConfig(d_model=d, n_heads=4, head_dim=64, expand_v=1.0),
         lambda: GatedDeltaNet(hidden_size=d, head_dim=64, num_heads=4, expand_v=1.0),
         lambda out: out[0]),
        ("rwkv", RWKV7Config(d_model=d, head_dim=64),
         lambda: RWKV7Attention(hidden_size=d, head_dim=64, layer_idx=0, num_hidden_layers=1),
         lambda out: out[0]),
    ]


def run(module, x, take=lambda out: out):
    """Output, input gradient and the median forward+backward time (ms) over 10 repeats."""
    x = x.clone().requires_grad_(True)
    times = []
    for _ in range(12):
        x.grad = None
        torch.cuda.synchronize()
        start = time.perf_counter()
        y = take(module(x))
        y.float().pow(2).mean().backward()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return y.detach().float(), x.grad.float(), 1000 * sorted(times[2:])[len(times[2:]) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=256)
    args = parser.parse_args()
    assert torch.cuda.is_available(), "the GPU check needs CUDA"
    warnings.filterwarnings("ignore")
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, B={args.batch} L={args.seq_len} "
          f"D={args.d_model}, float32")
    print("| mixer | path | max abs diff (out) | max abs diff (grad x) | fwd+bwd ms |")
    print("|---|---|---|---|---|")
    for name, cfg, make, take in library_layers(args.d_model):
        torch.manual_seed(0)
        lib = make().to(dev)
        ours = cfg.mixer(args.seq_len, None, 0).to(dev)
        ours.load_state_dict(lib.state_dict())
        x = torch.randn(args.batch, args.seq_len, args.d_model, device=dev)
        y_lib, g_lib, t_lib = run(lib, x, take)
        print(f"| {name} | library layer | - | - | {t_lib:.2f} |")
        for path in ("fused", "reference"):
            ours.kernel = path
            y, g, t = run(ours, x)
            print(f"| {name} | ours, {path} | {(y - y_lib).abs().max():.2e} | "
                  f"{(g - g_lib).abs().max():.2e} | {t:.2f} |")


if __name__ == "__main__":
    main()
