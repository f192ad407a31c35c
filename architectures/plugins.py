"""Your own mixer, no fork: a dotted path or a registration call, checked by the same contract.

A plug-in is either
- an `ArchConfig` subclass (like the built-ins: fields plus `mixer(seq_len, pattern, layer_idx)`),
- or an `nn.Module` whose constructor is `(d_model, seq_len, layer_idx, *, field=default, ...)`
  and whose forward maps (B, L, D) -> (B, L, D) causally. Its keyword fields, with their
  annotations and defaults, become the `arch.*` fields of a config class made for it.
A module plug-in may declare its state with a static method `state_per_layer(d_model, seq_len,
**fields) -> int` (numbers one layer keeps per sequence to produce the next token), which
`bench describe` and every run record show.
Name it in a config as `arch.name=my_pkg.mixers:MyMixer`, or call `register("my_mixer",
MyMixer)` in a module listed under `plugins` (`plugins=[my_pkg.mixers]` in a run config or a
sweep spec: every worker imports it) and use `arch.name=my_mixer`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys
from typing import Any

import torch
from torch import nn

from .backbone import ArchConfig
from .protocols import PatchesAttention, RecordsAttention

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

    namespace = {"mixer": mixer}
    state = getattr(cls, "state_per_layer", None)
    if callable(state):  # declared: numbers one layer keeps per sequence (describe, records)
        def memory_per_layer(self, seq_len: int) -> int | None:
            kwargs = {f[0]: getattr(self, f[0]) for f in fields}
            return state(d_model=self.d_model, seq_len=seq_len, **kwargs)

        namespace["memory_per_layer"] = memory_per_layer
    config = dataclasses.make_dataclass(
        f"{cls.__name__}Config", [("name", str, dataclasses.field(default=name)), *fields],
        bases=(ArchConfig,), namespace=namespace,
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
    module = _import(module_name, name)
    try:
        obj = getattr(module, attr)
    except AttributeError as e:
        raise ContractError(f"{name}: cannot import ({e})") from None
    return as_config_class(obj, name)


def import_plugins(modules: list[str]) -> None:
    """Import each module (the working directory is importable); a module registers its mixers
    with `register` when imported. Importing twice is a no-op, so every worker process can."""
    for module in modules:
        _import(module, module)


def _import(module_name: str, label: str) -> Any:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        looked = [os.getcwd(), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                 if p]]
        raise ContractError(f"{label}: cannot import ({e}); looked in the working directory "
                            f"and PYTHONPATH ({', '.join(dict.fromkeys(looked))}) and the "
                            "installed packages: run from the directory that holds it, or add "
                            "that directory to PYTHONPATH") from None
    except Exception as e:  # the module itself raised, or does not parse: user code, one line
        raise ContractError(f"{label}: importing it raised {one_line(e)}") from None


_PASSED: set[tuple[type, str, int]] = set()  # (config class, config, seq_len) checked here


def check_mixer(config: ArchConfig, seq_len: int, batch_sizes: tuple[int, ...] = ()) -> None:
    """The contract, on one freshly built mixer and random input: shape, finite values, finite
    gradients, causality (`check_causal`, in train and eval mode), no state carried from one
    call to the next, and what its declared protocols promise. The causality proof costs L^2
    tokens of forward and backward (about a second at L = 47 for the references on CPU), so a
    config that passed is not checked again in this process. Causality is also checked by
    intervention (`check_intervened`) at `batch_sizes` (the run's) under every mode."""
    key = (type(config), repr(config), seq_len, tuple(batch_sizes))
    if key in _PASSED:
        return
    gen = torch.Generator().manual_seed(0)
    try:
        mixer = config.mixer(seq_len, torch.zeros(seq_len, seq_len), 0)
    except Exception as e:  # user code: one line, whatever it raised
        raise ContractError(f"mixer '{config.name}' failed to build: {one_line(e)}") from None
    D = config.d_model
    x = torch.randn(2, seq_len, D, generator=gen, requires_grad=True)
    label = f"mixer '{config.name}'"
    y = _call(mixer, x, label)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ContractError(f"{label} must map (B, L, D) = {tuple(x.shape)} to the same shape, "
                            f"got {got}")
    if not torch.isfinite(y).all():
        raise ContractError(f"{label} returned non-finite values")
    y.square().mean().backward()
    if x.grad is None or not torch.isfinite(x.grad).all():
        raise ContractError(f"{label} does not backpropagate finite gradients to its input")
    for training in (True, False):
        mixer.train(training)
        check_causal(mixer, x.detach()[0], label + (" (train mode)" if training else
                                                    " (eval mode)"))
        _check_stateless(mixer, x.detach(), label)
    check_intervened(mixer, seq_len, D, label, tuple(batch_sizes) or (2,))
    mixer.train(True)
    if isinstance(mixer, RecordsAttention):
        _check_attention(mixer, x.detach(), label)
    if isinstance(mixer, PatchesAttention):
        _check_patch(mixer, x.detach(), label)
    _PASSED.add(key)


def check_causal(mixer: nn.Module, x: torch.Tensor, label: str, chunk: int | None = None) -> None:
    """Output p must not depend on any input q > p, for every p, proven by gradients: the
    sequence x (L, D) is copied once per output position checked, each copy's output at its
    position is projected on a random direction, and one backward pass gives every copy's
    gradient, which must be exactly zero after that position. The random draws of the forward
    (dropout) are fixed within the pass, so a mixer with dropout is checked, not refused; a
    mixer that mixes the sequences of a batch fails too (another copy's later output would
    reach these inputs)."""
    L, D = x.shape
    chunk = chunk or max(1, min(L - 1, 2**23 // (L * D)))  # copies per pass (~32 MiB input)
    direction = torch.randn(D, generator=torch.Generator().manual_seed(1))
    for start in range(0, L - 1, chunk):
        positions = torch.arange(start, min(start + chunk, L - 1))  # the last has no future
        xs = x.expand(len(positions), L, D).clone().requires_grad_(True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            y = _call(mixer, xs, label)
        picked = y[torch.arange(len(positions)), positions]  # (P, D)
        (grad,) = torch.autograd.grad((picked * direction).sum(), xs, allow_unused=True)
        if grad is None:
            continue
        later = torch.arange(L)[None, :] > positions[:, None]  # (P, L)
        leak = (grad.abs().amax(-1) > 0) & later
        if leak.any():
            k, q = (int(v) for v in leak.nonzero()[0])
            raise ContractError(f"{label} is not causal: output {int(positions[k])} depends on "
                                f"input {q}")


MAX_CHECK_BATCH = 64  # a larger run batch is checked at this size (the same code path)
SPOT_BATCH, SPOT_CUTS = 2, 8  # besides the run's sizes: a batch of 2 at 8 random cuts


def check_intervened(mixer: nn.Module, L: int, D: int, label: str,
                     batch_sizes: tuple[int, ...]) -> None:
    """Causality and batch independence by intervention, as training and evaluation call the
    mixer: in train and eval mode, with autograd on and off (evaluation runs under no_grad), at
    each batch size, at length L and at a shorter one. At every cut c (every position but the
    last), replacing every input after c, and replacing input c + 1 alone, must leave every
    output up to c bit-identical: a read of any later position by any earlier output shows here,
    through `.detach()` or only without autograd, where gradients cannot see it. The cuts are
    batched, one per sequence of a call, dealt to the sequences in a new random order at every
    call, so that which copy sits where (or how many calls came before) buys nothing. Replacing
    the other sequences of a batch must leave the first one's outputs bit-identical (no mixing
    across sequences). Random draws (dropout) are fixed per call. Every cut is checked at each of
    `batch_sizes` (the run's) at the run's length L; a batch of SPOT_BATCH besides (another size,
    and the smallest that can mix sequences), and the other length, at SPOT_CUTS random cuts.
    Cost: 3 calls per batch of cuts, so about 3 (L - 1) / batch calls per mode and run batch
    size."""
    gen = torch.Generator().manual_seed(3)
    was_training = mixer.training
    lengths = sorted({L, max(2, (L + 1) // 2)}) if L > 2 else [L]
    sizes = {min(b, MAX_CHECK_BATCH): None for b in batch_sizes if b >= 1}
    sizes.setdefault(SPOT_BATCH, SPOT_CUTS)  # batch -> cuts checked (None: every one)
    for length in lengths:
        for training in (True, False):
            mixer.train(training)
            for grad in (True, False):
                for batch, cuts in sorted(sizes.items()):
                    cuts = cuts if length == L else SPOT_CUTS  # the other length: spot cuts
                    mode = (f"{'train' if training else 'eval'} mode, "
                            f"{'with' if grad else 'without'} autograd, batch {batch}, "
                            f"length {length}")
                    _every_cut(mixer, length, D, batch, gen, label, grad, mode, cuts)
    mixer.train(was_training)


def _every_cut(mixer: nn.Module, L: int, D: int, batch: int, gen: torch.Generator, label: str,
               grad: bool, mode: str, limit: int | None = None) -> None:
    """check_intervened at one mode, batch size and length: every cut 0 .. L-2 (or `limit`
    random ones), `batch` at a time (a sequence left without a cut is replaced nowhere)."""
    cuts = torch.randperm(max(L - 1, 0), generator=gen)[:limit]
    for start in range(0, max(len(cuts), 1), batch):
        group = cuts[start:start + batch].tolist()
        slots = torch.randperm(batch, generator=gen)[:len(group)].tolist()  # cut k -> sequence
        x = torch.randn(batch, L, D, generator=gen)
        after, single = x.clone(), x.clone()
        for slot, cut in zip(slots, group):
            after[slot, cut + 1:] = torch.randn(L - cut - 1, D, generator=gen)
            single[slot, cut + 1] = torch.randn(D, generator=gen)
        y = _fixed_call(mixer, x, label, grad)
        for changed, what in ((after, "the inputs after position {c}"),
                              (single, "input {j} alone")):
            y_changed = _fixed_call(mixer, changed, label, grad)
            for slot, cut in zip(slots, group):
                same = (y[slot, :cut + 1] == y_changed[slot, :cut + 1]).all(-1)  # (cut + 1,)
                if not bool(same.all()):
                    _unless_unrepeatable(mixer, ((x, y), (changed, y_changed)), label, grad,
                                         mode)
                    first = int((~same).nonzero()[0])
                    raise ContractError(
                        f"{label} is not causal ({mode}): changing "
                        f"{what.format(c=cut, j=cut + 1)} changed output {first}")
        if batch > 1 and start == 0:
            others = x.clone()
            others[1:] = torch.randn(others[1:].shape, generator=gen)
            y_others = _fixed_call(mixer, others, label, grad)
            if not torch.equal(y[0], y_others[0]):
                _unless_unrepeatable(mixer, ((x, y), (others, y_others)), label, grad, mode)
                raise ContractError(f"{label} mixes the sequences of a batch ({mode}): "
                                    "changing the other sequences changed the first one's "
                                    "outputs")


def _unless_unrepeatable(mixer: nn.Module, calls: tuple[tuple[torch.Tensor, torch.Tensor], ...],
                         label: str, grad: bool, mode: str) -> None:
    """Before blaming a change on the changed inputs: each (input, output) pair, called again,
    must give the same output; a mixer whose output drifts from call to call is named for that
    (not for a leak it may not have)."""
    if not all(torch.equal(y, _fixed_call(mixer, x, label, grad)) for x, y in calls):
        raise ContractError(f"{label} is not repeatable ({mode}): the same input gave another "
                            "output on a later call (state kept between calls, or behaviour "
                            "that depends on how many calls came before)")


def _fixed_call(mixer: nn.Module, x: torch.Tensor, label: str, grad: bool) -> torch.Tensor:
    with torch.random.fork_rng(devices=[]), torch.set_grad_enabled(grad):
        torch.manual_seed(0)
        return _call(mixer, x.requires_grad_(grad) if grad else x, label).detach()


def _check_stateless(mixer: nn.Module, x: torch.Tensor, label: str) -> None:
    """The same input gives the same output whatever was called before (no state kept between
    calls, e.g. a buffer holding the last batch), with the random draws fixed."""
    for grad in (False, True):  # a mixer may keep state only while autograd is on
        first = _fixed_call(mixer, x.detach().clone(), label, grad)
        _fixed_call(mixer, torch.randn(x.shape, generator=torch.Generator().manual_seed(2)),
                    label, grad)
        if not torch.equal(first, _fixed_call(mixer, x.detach().clone(), label, grad)):
            raise ContractError(f"{label} keeps state between calls "
                                f"({'with' if grad else 'without'} autograd): the same input "
                                "gave another output after a different input")


def _call(mixer: nn.Module, x: torch.Tensor, label: str) -> torch.Tensor:
    try:
        return mixer(x)
    except Exception as e:  # user code: one line, whatever it raised
        raise ContractError(f"{label} failed in forward: {one_line(e)}") from None


def one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")


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


def _check_patch(mixer: PatchesAttention, x: torch.Tensor, label: str) -> None:
    """A `PatchesAttention` mixer computes with the probabilities a patch gives: its own
    (recorded) ones give its own output, uniform causal ones another."""
    L = x.shape[1]
    mixer.eval()
    try:
        with torch.no_grad():
            mixer.record_attention = True
            plain = mixer(x)
            own = mixer.last_attention
            mixer.record_attention = False
            mixer.attention_patch = lambda probs: own
            same = mixer(x)
            uniform = torch.ones(L, L, device=x.device).tril()
            uniform = (uniform / uniform.sum(-1, keepdim=True)).to(own.dtype)
            mixer.attention_patch = lambda probs: uniform.expand_as(probs)
            other = mixer(x)
    finally:
        mixer.attention_patch, mixer.record_attention = None, False
        mixer.train(True)
    if not torch.allclose(plain, same, atol=1e-5) or torch.allclose(plain, other, atol=1e-6):
        raise ContractError(f"{label} declares PatchesAttention but does not compute with the "
                            "probabilities use_attention returns")
