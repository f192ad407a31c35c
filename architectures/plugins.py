"""Your own mixer, no fork: a dotted path or a registration call, checked by the same contract.

A plug-in is either
- an `ArchConfig` subclass (like the built-ins: fields plus `mixer(seq_len, pattern, layer_idx)`),
- or an `nn.Module` whose constructor is `(d_model, seq_len, layer_idx, *, field=default, ...)`
  and whose forward maps (B, L, D) -> (B, L, D) causally. Its keyword fields, with their
  annotations and defaults, become the `arch.*` fields of a config class made for it.
Name it in a config as `arch.name=my_pkg.mixers:MyMixer`, or call
`register("my_mixer", MyMixer)` and use `arch.name=my_mixer`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys

import torch
from torch import nn

from .backbone import ArchConfig
from .protocols import RecordsAttention

FIELD_TYPES = {"int": int, "float": float, "bool": bool, "str": str}
RESERVED = {"self", "d_model", "seq_len", "layer_idx"}


class ContractError(ValueError):
    """A mixer that breaks the contract; the message is one line."""


def config_for_module(cls: type[nn.Module], name: str) -> type[ArchConfig]:
    """A config dataclass whose fields are the keyword arguments of `cls.__init__`."""
    params = inspect.signature(cls.__init__).parameters
    missing = {"d_model", "seq_len", "layer_idx"} - set(params)
    if missing:
        raise ContractError(
            f"{name}: the constructor must take d_model, seq_len, layer_idx; "
            f"missing {', '.join(sorted(missing))}"
        )
    fields = []
    for p in params.values():
        if p.name in RESERVED or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        # a class, or its name as a string under `from __future__ import annotations`
        kind = FIELD_TYPES.get(getattr(p.annotation, "__name__", p.annotation))
        if kind is None or p.default is inspect.Parameter.empty:
            raise ContractError(f"{name}: argument '{p.name}' needs a default and an int, "
                                "float, bool or str annotation to become a config field")
        fields.append((p.name, kind, dataclasses.field(default=p.default)))

    def mixer(self, seq_len: int, pattern: torch.Tensor, layer_idx: int = 0) -> nn.Module:
        kwargs = {f[0]: getattr(self, f[0]) for f in fields}
        return cls(d_model=self.d_model, seq_len=seq_len, layer_idx=layer_idx, **kwargs)

    config = dataclasses.make_dataclass(
        f"{cls.__name__}Config", [("name", str, dataclasses.field(default=name)), *fields],
        bases=(ArchConfig,), namespace={"mixer": mixer},
    )
    config.__module__ = cls.__module__
    return config


def as_config_class(obj: object, name: str) -> type[ArchConfig]:
    if isinstance(obj, type) and issubclass(obj, ArchConfig):
        if not dataclasses.is_dataclass(obj):
            raise ContractError(f"{name}: an ArchConfig plug-in must be a dataclass")
        return obj
    if isinstance(obj, type) and issubclass(obj, nn.Module):
        return config_for_module(obj, name)
    raise ContractError(f"{name}: expected an nn.Module or ArchConfig subclass")


def load_dotted(name: str) -> type[ArchConfig]:
    """`package.module:Class` -> its config class. The working directory is importable."""
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ContractError(f"{name}: a plug-in is named as package.module:Class")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ContractError(f"{name}: cannot import ({e})") from None
    return as_config_class(obj, name)


def check_mixer(config: ArchConfig, seq_len: int) -> None:
    """Shape, finiteness, backward and causality of one freshly built mixer, on random input."""
    gen = torch.Generator().manual_seed(0)
    mixer = config.mixer(seq_len, torch.zeros(seq_len, seq_len), 0)
    D, j = config.d_model, seq_len // 2
    x = torch.randn(2, seq_len, D, generator=gen, requires_grad=True)
    y = mixer(x)
    label = f"mixer '{config.name}'"
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ContractError(f"{label} must map (B, L, D) = {tuple(x.shape)} to the same shape, "
                            f"got {got}")
    if not torch.isfinite(y).all():
        raise ContractError(f"{label} returned non-finite values")
    y.square().mean().backward()
    if x.grad is None or not torch.isfinite(x.grad).all():
        raise ContractError(f"{label} does not backpropagate finite gradients to its input")
    changed = x.detach().clone()
    changed[:, j:] = torch.randn(2, seq_len - j, D, generator=gen)
    with torch.no_grad():
        y2 = mixer(changed)
    leaked = (y.detach()[:, :j] - y2[:, :j]).abs().amax(dim=(0, 2)) > 1e-5
    if leaked.any():
        first = int(leaked.nonzero()[0])
        raise ContractError(f"{label} is not causal: output {first} changed when inputs "
                            f"{j}.. changed")
    if isinstance(mixer, RecordsAttention):
        _check_attention(mixer, x.detach(), label)


def _check_attention(mixer: RecordsAttention, x: torch.Tensor, label: str) -> None:
    """A `RecordsAttention` mixer keeps (B, H, L, L) probabilities, causal, rows summing to 1."""
    B, L = x.shape[:2]
    mixer.record_attention, mixer.last_attention = True, None
    try:
        with torch.no_grad():
            mixer(x)
    finally:
        mixer.record_attention = False
    probs = mixer.last_attention
    if not isinstance(probs, torch.Tensor) or probs.dim() != 4 or probs.shape[0] != B \
            or probs.shape[2:] != (L, L):
        got = tuple(probs.shape) if isinstance(probs, torch.Tensor) else probs
        raise ContractError(f"{label} declares RecordsAttention but kept {got}, not "
                            f"(B, H, L, L) = ({B}, H, {L}, {L}) probabilities")
    future = probs.float().triu(1).abs().amax()
    rows = probs.float().sum(-1)
    if future > 1e-6 or not torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
        raise ContractError(f"{label} declares RecordsAttention but its kept attention is not "
                            "causal probabilities (rows must sum to 1, nothing above the diagonal)")
