"""RWKV-7 "Goose" time mixing: a diagonal-plus-low-rank (DPLR) delta-rule recurrence per head.

The module creates exactly the parameters of `fla.layers.RWKV7Attention` (names and shapes; layer
0 has no `v_lora`), so a state dict loads into either. Per head the state S (K x V) evolves as
S_t = S_{t-1} (diag(exp(w_t)) + (-kk_t)(kk_t a_t)^T) + k_t v_t^T and the output reads r_t S_t.
Layers after the first mix their values with the first layer's (value residual), passed through
the backbone's per-forward `context`. Two paths compute one function:
- fused: fla's chunked Triton kernel `chunk_rwkv7`, on CUDA;
- reference: fla's own pure-torch `dplr_chunkwise` (layout (B, H, L, D), fixed q scale K^-1/2,
  so r is pre-multiplied by K^1/2 to get RWKV's scale 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import Backbone, RecurrentConfig, lazy_op, pick_path, require_fused
from .init import STD, mlp_inputs, mlp_outputs
from .protocols import ReportsKernelPath, UsesContext

# fla's ops, imported on first use: the fused kernel needs CUDA at run time, the naive op any device
fused_op = lazy_op("fla.ops.rwkv7", "chunk_rwkv7")
naive_op = lazy_op("fla.ops.generalized_delta_rule.dplr.naive", "dplr_chunkwise")

W_SCALE = -math.exp(-0.5)  # w = W_SCALE * sigmoid(.): log-decays in (-0.61, 0)
CHUNK = 4  # fla's naive chunked op loops over chunk positions: small chunks are fastest on CPU


@dataclass
class RWKV7Config(RecurrentConfig):
    name: str = "rwkv"
    head_dim: int = 16
    """size of each head (must divide d_model; heads = d_model / head_dim)"""
    low_rank_dim: int = 0
    """rank of the decay, in-context-rate, value and gate LoRAs; 0 = fla's defaults"""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.head_dim < 1 or self.d_model % self.head_dim:
            raise ValueError(
                f"head_dim: must be >= 1 and divide d_model ({self.d_model}), got {self.head_dim}"
            )
        self.require_at_least(0, "low_rank_dim")
        require_fused(self.kernel, fused_op, "fla")

    def memory_per_layer(self, seq_len: int) -> int:
        return self.d_model * self.head_dim + self.d_model  # K x K per head + the shifted token

    @torch.no_grad()
    def reference_init(self, model: Backbone) -> None:
        """fla's RWKV7ForCausalLM (`RWKV7PreTrainedModel._init_weights`, after RWKV-LM's v7
        train_temp): the embedding U(-1e-4, 1e-4); the head orthogonal with gain 0.5 sqrt(V / D)
        where V > D, else 0.5; the layer's own initialisation (RWKV7Attention's, as built here);
        the MLP as RWKV7FeedForward: its input layer orthogonal, its output layer 0; biases 0."""
        nn.init.uniform_(model.embed.weight, -1e-4, 1e-4)
        if model.pos is not None:
            nn.init.normal_(model.pos, std=STD)
        V, D = model.head.weight.shape
        nn.init.orthogonal_(model.head.weight, gain=0.5 * math.sqrt(V / D) if V > D else 0.5)
        nn.init.zeros_(model.head.bias)
        for layer in mlp_inputs(model):
            nn.init.orthogonal_(layer.weight)
            nn.init.zeros_(layer.bias)
        for weight in mlp_outputs(model):
            nn.init.zeros_(weight)
        for block in model.blocks:
            if block.mlp is not None:
                nn.init.zeros_(block.mlp[-1].bias)

    def mixer(self, seq_len: int, pattern: torch.Tensor, layer_idx: int = 0) -> nn.Module:
        return RWKV7Attention(self, layer_idx)


class LoRA(nn.Module):
    """x -> B(act(A x)) (+ bias): `lora.0` and `lora.2` as in fla's LoRA."""

    def __init__(self, d_in: int, d_out: int, rank: int, activation: nn.Module, bias: bool = True):
        super().__init__()
        self.lora = nn.Sequential(nn.Linear(d_in, rank, bias=False), activation,
                                  nn.Linear(rank, d_out, bias=bias))
        nn.init.zeros_(self.lora[0].weight)
        gain = math.sqrt(rank / d_out) if rank > d_out else 1.0
        nn.init.orthogonal_(self.lora[2].weight, gain=0.1 * gain)
        if bias:
            nn.init.zeros_(self.lora[2].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lora(x)


def _rank(given: int, scale: float, d: int, factor: float) -> int:
    """fla's default LoRA rank: a multiple of 32 near scale * sqrt(d) * factor, at least 32."""
    return given or max(32, int(round(scale * math.sqrt(d) * factor / 32) * 32))


class RWKV7Attention(UsesContext, ReportsKernelPath, nn.Module):

    def __init__(self, cfg: RWKV7Config, layer_idx: int):
        super().__init__()
        d, hd = cfg.d_model, cfg.head_dim
        self.layer_idx, self.kernel = layer_idx, cfg.kernel
        self.n_heads, self.head_dim = d // hd, hd
        factor = hd / 64
        for name in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            setattr(self, name, nn.Parameter(torch.zeros(1, 1, d)))
        self.k_k = nn.Parameter(torch.zeros(d))
        self.k_a = nn.Parameter(torch.zeros(d))
        self.r_k = nn.Parameter(torch.zeros(self.n_heads, hd))
        self.r_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        r = cfg.low_rank_dim
        self.w_lora = LoRA(d, d, _rank(r, 2.5, d, factor), nn.Tanh())
        if layer_idx != 0:
            self.v_lora = LoRA(d, d, _rank(r, 1.7, d, factor), nn.Identity())
        self.a_lora = LoRA(d, d, _rank(r, 2.5, d, factor), nn.Identity())
        self.g_lora = LoRA(d, d, _rank(r, 5.0, d, 1.0), nn.Sigmoid(), bias=False)
        self.g_norm = nn.GroupNorm(self.n_heads, d, eps=hd * 1e-5)
        self.init_like_rwkv(cfg.n_layers)

    @torch.no_grad()
    def init_like_rwkv(self, n_layers: int) -> None:
        """RWKV-7's layer-dependent initialisation (token-shift mixes, decay and rate biases)."""
        d, hd = self.k_k.shape[0], self.head_dim
        depth = self.layer_idx / max(n_layers - 1, 1)  # 0 .. 1
        shallow = 1.0 - self.layer_idx / n_layers  # 1 .. ~0
        n = torch.arange(d, dtype=torch.float32)
        ramp = (n / d).view(1, 1, d)
        linear = n / (d - 1) - 0.5
        zigzag = ((n % hd) - (hd - 1) / 2) / ((hd - 1) / 2)
        zigzag = zigzag * zigzag.abs()
        for name, power in (("x_r", 0.2), ("x_w", 0.9), ("x_k", 0.7), ("x_v", 0.7), ("x_a", 0.9),
                            ("x_g", 0.2)):
            getattr(self, name).copy_(1.0 - ramp.pow(power * shallow))
        self.k_a.fill_(1.02)
        self.r_k.fill_(-0.04)
        self.k_k.copy_(0.71 - linear * 0.1)
        decay = -6 + 6 * (n / (d - 1)) ** (1 + depth**0.3)
        self.w_lora.lora[2].bias.copy_(decay + 0.5 + zigzag * 2.5)
        self.a_lora.lora[2].bias.copy_(-0.19 + zigzag * 0.3 + linear * 0.4)
        if self.layer_idx != 0:
            self.v_lora.lora[2].bias.copy_(0.73 - linear * 0.4)
        self.g_norm.weight.fill_(((self.layer_idx + 1) / n_layers) ** 0.7)
        nn.init.orthogonal_(self.r_proj.weight)
        nn.init.orthogonal_(self.k_proj.weight, gain=0.1)
        nn.init.orthogonal_(self.v_proj.weight)
        nn.init.zeros_(self.o_proj.weight)

    def forward(self, x: torch.Tensor, context: dict | None = None) -> torch.Tensor:
        B, L, D = x.shape
        H, K = self.n_heads, self.head_dim
        shifted = F.pad(x, (0, 0, 1, -1)) - x  # x_{t-1} - x_t, with x_{-1} = 0
        xr, xw, xk, xv, xa, xg = (x + shifted * m for m in
                                  (self.x_r, self.x_w, self.x_k, self.x_v, self.x_a, self.x_g))
        r = self.r_proj(xr)
        w = W_SCALE * self.w_lora(xw).sigmoid()  # log-decay per channel
        k, v = self.k_proj(xk), self.v_proj(xv)
        context = {} if context is None else context
        if self.layer_idx == 0 or "v_first" not in context:
            context["v_first"] = v
        else:
            v = torch.lerp(v, context["v_first"], self.v_lora(xv).sigmoid())
        a = self.a_lora(xa).sigmoid()  # in-context learning rate
        g = self.g_lora(xg)
        kk = F.normalize((k * self.k_k).view(B, L, H, K), dim=-1)
        k = k + k * (a - 1) * self.k_a
        r, w, k, a, v = (t.view(B, L, H, K) for t in (r, w, k, a, v))  # (B, L, H, K)

        self.last_path = pick_path(self.kernel, x, fused_op)
        if self.last_path == "fused":
            o, _ = fused_op()(r=r, w=w, k=k, v=v, a=-kk, b=kk * a, scale=1.0, safe_gate=True,
                               lower_bound=W_SCALE, chunk_size=64)
        else:
            o = self.reference(r, w, k, v, -kk, kk * a)
        o = self.g_norm(o.reshape(B * L, D)).view(B, L, D)
        bonus = ((r * k * self.r_k).sum(-1, keepdim=True) * v).view(B, L, D)
        return self.o_proj((o + bonus) * g)

    def reference(self, r, w, k, v, alpha, beta) -> torch.Tensor:
        """fla's naive chunked DPLR op on (B, L, H, K) inputs, padded to whole chunks."""
        L = r.shape[1]
        pad = (-L) % CHUNK
        r = r * math.sqrt(self.head_dim)  # undo the op's fixed K^-1/2 query scale
        args = [F.pad(t, (0, 0, 0, 0, 0, pad)).transpose(1, 2) for t in (r, k, v, alpha, beta, w)]
        o, _ = naive_op()(*args, output_final_state=False, chunk_size=CHUNK)
        return o.transpose(1, 2)[:, :L].to(r.dtype)  # (B, L, H, K)
