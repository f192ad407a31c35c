"""`arch.init`: each built-in architecture starts as its reference implementation starts it,
checked against the reference itself (transformers' GPT-2, fla's model classes) where it builds on
CPU, and against the cited formulas where it does not (mamba_ssm's CUDA package, timm's MlpMixer);
`torch` draws exactly what every committed board drew."""

import math
import warnings

import pytest
import torch

from architectures import ARCHITECTURES, Backbone
from architectures.gated_deltanet import GatedDeltaNetConfig
from architectures.mamba import MambaConfig
from architectures.mlp_mixer import MLPMixerConfig
from architectures.rwkv import RWKV7Config
from architectures.transformer import TransformerConfig
from bench.core.rows import job_id

V, L = 50, 24


def build(config, seed=0, vocab=V):
    torch.manual_seed(seed)
    return Backbone(config, vocab, L, torch.zeros(L, L))


def params(model):
    return {k: v.detach() for k, v in model.named_parameters()}


def assert_like(ours: torch.Tensor, theirs: torch.Tensor, name: str):
    """The same distribution within sampling error: a constant matches exactly, a random draw
    matches in mean (within 6 standard errors of one sample: ~4 of the difference) and in
    standard deviation (within about 5 standard errors of the ratio: 5 / sqrt(n))."""
    a, b = ours.detach().double().flatten(), theirs.detach().double().flatten()
    assert a.numel() == b.numel(), name
    if b.std() == 0 or b.numel() == 1:
        assert torch.allclose(a.sort().values, b.sort().values, atol=1e-6), name
        return
    se = b.std() / math.sqrt(b.numel())
    assert abs(a.mean() - b.mean()) < 6 * se + 1e-9, (name, float(a.mean()), float(b.mean()))
    rel = max(0.05, 5 / math.sqrt(b.numel()))
    assert abs(a.std() / b.std() - 1) < rel, (name, float(a.std()), float(b.std()))


# --- torch: the committed boards' initialisation, unchanged -------------------------------------
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_torch_draws_what_the_boards_drew_and_reference_differs(name):
    """`torch` adds no draw after building (the models of every committed run, and the random
    stream after them, are as they were); `reference` changes the model."""
    torch_model = build(ARCHITECTURES[name](init="torch"), seed=0)
    after_torch = torch.rand(3)
    reference = build(ARCHITECTURES[name]())
    assert ARCHITECTURES[name]().init == "reference"
    changed = [k for k, v in params(torch_model).items()
               if not torch.equal(v, params(reference)[k])]
    assert "embed.weight" in changed
    torch.manual_seed(0)  # the same build by hand, no init step: the pre-2026-12-07 backbone
    from architectures.backbone import Block
    cfg = ARCHITECTURES[name](init="torch")
    embed = torch.nn.Embedding(V, cfg.d_model)
    pos = 0.02 * torch.randn(L, cfg.d_model) if cfg.positional else None
    blocks = [Block(cfg.d_model, cfg.mixer(L, torch.zeros(L, L), i), cfg.mlp_ratio)
              for i in range(cfg.n_layers)]
    torch.nn.LayerNorm(cfg.d_model), torch.nn.Linear(cfg.d_model, V)
    assert torch.equal(torch.rand(3), after_torch)
    assert torch.equal(embed.weight, torch_model.embed.weight)
    if pos is not None:
        assert torch.equal(pos, torch_model.pos)
    assert all(torch.equal(a, b) for a, b in zip(blocks[-1].state_dict().values(),
                                                 torch_model.blocks[-1].state_dict().values()))


def test_torch_init_keeps_job_ids_and_reference_gets_new_ones():
    """A stored config without the field (every committed record) and one saying `torch` have
    one id; `reference` and `embedding` are other jobs."""
    from bench.training.config import load_run_config

    cfg = load_run_config(["arch.init=torch"]).to_dict()
    old = {**cfg, "arch": {k: v for k, v in cfg["arch"].items() if k != "init"}}
    assert job_id(cfg) == job_id(old)
    ids = {job_id(load_run_config([f"arch.init={i}"]).to_dict())
           for i in ("torch", "reference", "embedding")}
    assert len(ids) == 3
    assert job_id(load_run_config([]).to_dict()) == \
        job_id(load_run_config(["arch.init=reference"]).to_dict())


def test_the_embedding_arm_moves_only_the_token_embedding():
    torch_model = build(TransformerConfig(init="torch"))
    arm = build(TransformerConfig(init="embedding"))
    for k, v in params(arm).items():
        assert torch.equal(v, params(torch_model)[k]) == (k != "embed.weight"), k
    assert abs(float(arm.embed.weight.detach().std()) - 0.02) < 0.003


@pytest.mark.parametrize("bad", ["gpt2", "", "Reference", "none"])
def test_an_unknown_init_is_a_one_line_error(bad):
    from bench.core.errors import ConfigError
    from bench.training.config import load_run_config

    with pytest.raises(ConfigError, match=r"^arch\.init: .*reference.*torch.*embedding"):
        load_run_config([f"arch.init={bad}"])


# --- reference: against the reference implementations ------------------------------------------
def test_transformer_starts_as_transformers_gpt2():
    """Per parameter, against transformers' GPT2LMHeadModel at the same sizes (its Conv1D
    weights are stored transposed; the statistics do not care)."""
    transformers = pytest.importorskip("transformers")
    d, layers = 128, 3
    theirs = params(transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_positions=L, n_embd=d, n_layer=layers, n_head=8)))
    ours = params(build(TransformerConfig(d_model=d, n_layers=layers, n_heads=8, head_dim=16)))
    pairs = {"embed.weight": "transformer.wte.weight", "pos": "transformer.wpe.weight",
             "norm.weight": "transformer.ln_f.weight", "norm.bias": "transformer.ln_f.bias",
             "head.weight": "transformer.wte.weight"}  # GPT-2 ties its head to wte
    for i in range(layers):
        ours_i, theirs_i = f"blocks.{i}.", f"transformer.h.{i}."
        pairs |= {ours_i + a: theirs_i + b for a, b in (
            ("mixer.qkv.weight", "attn.c_attn.weight"), ("mixer.out.weight", "attn.c_proj.weight"),
            ("norm.weight", "ln_1.weight"), ("norm.bias", "ln_1.bias"),
            ("mlp.0.weight", "ln_2.weight"), ("mlp.0.bias", "ln_2.bias"),
            ("mlp.1.weight", "mlp.c_fc.weight"), ("mlp.1.bias", "mlp.c_fc.bias"),
            ("mlp.3.weight", "mlp.c_proj.weight"), ("mlp.3.bias", "mlp.c_proj.bias"))}
    for a, b in pairs.items():
        assert_like(ours[a], theirs[b], a)
    assert ours["head.bias"].abs().max() == 0  # GPT-2's head has no bias (tied to wte)
    assert abs(float(ours["blocks.0.mixer.out.weight"].std()) - 0.02 / math.sqrt(6)) < 1e-3


def _fla_models():
    pytest.importorskip("fla.models")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import fla.models
    return fla.models


def test_gated_deltanet_starts_as_flas_model_class():
    """Against fla's GatedDeltaNetForCausalLM at the same sizes: every mixer parameter by name,
    the embedding, the head, the MLP's input and output layers (fla's SwiGLU up/down_proj)."""
    fm = _fla_models()
    d, layers = 64, 2
    theirs = params(fm.GatedDeltaNetForCausalLM(fm.GatedDeltaNetConfig(
        hidden_size=d, num_hidden_layers=layers, num_heads=2, head_dim=32, expand_v=1.0,
        vocab_size=V, fuse_norm=False, fuse_swiglu=False, fuse_cross_entropy=False)))
    ours = params(build(GatedDeltaNetConfig(d_model=d, n_layers=layers, n_heads=2, head_dim=32)))
    for name, p in ours.items():
        if ".mixer." in name and "A_log" not in name and "dt_bias" not in name:
            i, rest = name.split(".")[1], name.split(".mixer.")[1]
            assert_like(p, theirs[f"model.layers.{i}.attn.{rest}"], name)
    for i in range(layers):  # A_log, dt_bias: two values a layer: their ranges, not moments
        a_log, dt = ours[f"blocks.{i}.mixer.A_log"], ours[f"blocks.{i}.mixer.dt_bias"]
        assert (a_log <= math.log(16)).all()  # log U(0, 16)
        dt_values = torch.nn.functional.softplus(dt)
        assert ((dt_values >= 1e-3 - 1e-7) & (dt_values <= 0.1 + 1e-7)).all()
    assert_like(ours["embed.weight"], theirs["model.embeddings.weight"], "embed")
    assert_like(ours["head.weight"], theirs["lm_head.weight"], "head")
    for i in range(layers):
        assert_like(ours[f"blocks.{i}.mlp.1.weight"][:4 * d],
                    theirs[f"model.layers.{i}.mlp.up_proj.weight"][:4 * d], "fc1")
        assert_like(ours[f"blocks.{i}.mlp.3.weight"][:, :4 * d],
                    theirs[f"model.layers.{i}.mlp.down_proj.weight"][:, :4 * d], "fc2")


def test_rwkv7_starts_as_flas_model_class():
    """Against fla's RWKV7ForCausalLM: every mixer parameter by name (the token-shift mixes,
    decay and rate biases, LoRAs, projections), the embedding, the head, the MLP (fla's
    RWKV7FeedForward key and value)."""
    fm = _fla_models()
    d, layers = 64, 3
    ours = params(build(RWKV7Config(d_model=d, n_layers=layers, head_dim=16)))
    rank = {k: ours[f"blocks.1.mixer.{k}_lora.lora.0.weight"].shape[0] for k in "wavg"}
    with warnings.catch_warnings():  # the model class fixes its LoRA ranks; give it ours
        warnings.simplefilter("ignore")
        theirs = params(fm.RWKV7ForCausalLM(fm.RWKV7Config(
            hidden_size=d, num_hidden_layers=layers, head_dim=16, vocab_size=V, fuse_norm=False,
            fuse_cross_entropy=False, decay_low_rank_dim=rank["w"], a_low_rank_dim=rank["a"],
            v_low_rank_dim=rank["v"], gate_low_rank_dim=rank["g"])))
    for name, p in ours.items():
        if ".mixer." in name:
            i, rest = name.split(".")[1], name.split(".mixer.")[1]
            assert_like(p, theirs[f"model.layers.{i}.attn.{rest}"], name)
    assert_like(ours["embed.weight"], theirs["model.embeddings.weight"], "embed")
    assert_like(ours["head.weight"], theirs["lm_head.weight"], "head")
    for i in range(layers):
        assert_like(ours[f"blocks.{i}.mlp.1.weight"], theirs[f"model.layers.{i}.ffn.key.weight"],
                    "fc1")
        assert_like(ours[f"blocks.{i}.mlp.3.weight"],
                    theirs[f"model.layers.{i}.ffn.value.weight"], "fc2")
    big = build(RWKV7Config(d_model=d, n_layers=1, head_dim=16), vocab=256)  # V > D: larger gain
    gain = 0.5 * math.sqrt(256 / d)
    assert abs(float(big.head.weight.std()) * math.sqrt(256) - gain) < 0.05 * gain


def test_mamba_starts_as_mamba_ssms_language_model():
    """mamba_ssm needs CUDA to install, so against its cited formulas (models/mixer_seq_simple.py
    `_init_weights` over modules/mamba_simple.py's layer init): the embedding N(0, 0.02), Linear
    biases 0 but dt_proj's, out_proj and fc2 Kaiming-uniform / sqrt(2 n_layer), every other
    weight PyTorch's default (Kaiming-uniform: std 1 / sqrt(3 fan_in)), A_log = log(1..N), D = 1,
    softplus(dt bias) in [1e-3, 0.1]."""
    d, layers = 64, 3
    cfg = MambaConfig(d_model=d, n_layers=layers)
    m = build(cfg)
    p = params(m)
    kaiming = lambda fan_in: 1 / math.sqrt(3 * fan_in)  # noqa: E731
    assert abs(float(p["embed.weight"].std()) - 0.02) < 0.002
    assert abs(float(p["head.weight"].std()) - 0.02) < 0.002
    for i in range(layers):
        b = f"blocks.{i}."
        d_in = cfg.expand * d
        for name, fan_in, scale in (("mixer.in_proj.weight", d, 1),
                                    ("mixer.out_proj.weight", d_in, math.sqrt(2 * layers)),
                                    ("mlp.1.weight", d, 1),
                                    ("mlp.3.weight", 4 * d, math.sqrt(2 * layers))):
            assert abs(float(p[b + name].std()) * scale / kaiming(fan_in) - 1) < 0.06, name
        for name in ("mlp.1.bias", "mlp.3.bias"):
            assert p[b + name].abs().max() == 0
        assert torch.allclose(p[b + "mixer.A_log"].exp()[0], torch.arange(1.0, cfg.d_state + 1))
        assert torch.equal(p[b + "mixer.D"], torch.ones(d_in))
        dt = torch.nn.functional.softplus(p[b + "mixer.dt_proj.bias"])
        assert dt.min() >= 1e-4 and dt.max() <= 0.1 + 1e-6 and dt.std() > 0
    assert p["head.bias"].abs().max() == 0


def test_mlp_mixer_starts_as_timms_mlp_mixer():
    """timm's MlpMixer `_init_weights` (non-JAX): xavier-uniform token-mixing and channel weights
    (U(+-sqrt(6 / (fan_in + fan_out))): std sqrt(2 / (fan_in + fan_out))), MLP biases N(0, 1e-6)."""
    d, layers, heads = 64, 2, 2
    m = build(MLPMixerConfig(d_model=d, n_layers=layers, n_heads=heads))
    xavier = lambda a, b: math.sqrt(2 / (a + b))  # noqa: E731
    for block in m.blocks:
        w = block.mixer.weight.detach()
        assert w.abs().max() <= math.sqrt(3 / L) + 1e-6
        assert abs(float(w.std()) / xavier(L, L) - 1) < 0.08
        assert 0 < float(block.mixer.bias.std()) < 1e-5
        assert abs(float(block.mixer.proj.weight.std()) / xavier(d, d) - 1) < 0.08
        assert abs(float(block.mlp[1].weight.std()) / xavier(d, 4 * d) - 1) < 0.08
        assert 0 < float(block.mlp[3].bias.std()) < 1e-5
    assert abs(float(m.embed.weight.detach().std()) - 0.02) < 0.003


class Plain(torch.nn.Module):
    def __init__(self, d_model: int, seq_len: int, layer_idx: int):
        super().__init__()
        self.lin = torch.nn.Linear(d_model, d_model)
        torch.nn.init.constant_(self.lin.weight, 0.5)

    def forward(self, x):
        return self.lin(x)


def test_a_plug_ins_backbone_follows_init_and_its_mixer_keeps_its_own():
    from architectures.plugins import as_config_class

    cls = as_config_class(Plain, "plain")
    m = build(cls(init="reference"))
    assert torch.equal(m.blocks[0].mixer.lin.weight, torch.full((64, 64), 0.5))
    assert abs(float(m.embed.weight.detach().std()) - 0.02) < 0.003
    assert abs(float(m.blocks[0].mlp[3].weight.std()) - 0.02 / math.sqrt(4)) < 0.002
