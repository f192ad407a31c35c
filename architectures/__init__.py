"""Token-mixing architectures on one shared backbone.

`ARCHITECTURES` is the one registry: a plain dict from name to config class. A config builds
its mixer with `config.mixer(seq_len, pattern, layer_idx)`; `Backbone(config, vocab, seq_len,
pattern)` builds a model.
"""

from .backbone import ArchConfig, Backbone, Block
from .gated_deltanet import GatedDeltaNetConfig
from .mamba import MambaConfig
from .mlp_mixer import MLPMixerConfig
from .rwkv7 import RWKV7Config
from .transformer import TransformerConfig

ARCHITECTURES: dict[str, type[ArchConfig]] = {
    "transformer": TransformerConfig,
    "mlp_mixer": MLPMixerConfig,
    "mamba": MambaConfig,
    "gated_deltanet": GatedDeltaNetConfig,
    "rwkv": RWKV7Config,
}

__all__ = ["ARCHITECTURES", "ArchConfig", "Backbone", "Block"]
