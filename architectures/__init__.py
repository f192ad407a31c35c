"""Token-mixing architectures on one shared backbone.

`ARCHITECTURES` is the one registry: a plain dict from name to config class. A config builds
its mixer with `config.mixer(seq_len, pattern, layer_idx)`; `Backbone(config, vocab, seq_len,
pattern)` builds a model.
"""

from .backbone import ArchConfig, Backbone, Block
from .gated_deltanet import GatedDeltaNetConfig
from .mamba import MambaConfig
from .mlp_mixer import MLPMixerConfig
from .plugins import ContractError, as_config_class, check_mixer, import_plugins, load_dotted
from .protocols import PatchesAttention, RecordsAttention, ReportsKernelPath, UsesContext
from .rwkv import RWKV7Config
from .transformer import TransformerConfig

ARCHITECTURES: dict[str, type[ArchConfig]] = {
    "transformer": TransformerConfig,
    "mlp_mixer": MLPMixerConfig,
    "mamba": MambaConfig,
    "gated_deltanet": GatedDeltaNetConfig,
    "rwkv": RWKV7Config,
}



def register(name: str, mixer: type) -> None:
    """Add a plug-in (an nn.Module or ArchConfig subclass, see plugins.py) under `name`."""
    if name in ARCHITECTURES:
        raise ValueError(f"{name}: already registered")
    ARCHITECTURES[name] = as_config_class(mixer, name)


def resolve(name: str) -> type[ArchConfig]:
    """A registered name or a dotted `package.module:Class` -> its config class."""
    if name in ARCHITECTURES:
        return ARCHITECTURES[name]
    if ":" in name:
        return load_dotted(name)
    allowed = ", ".join(ARCHITECTURES)
    raise ContractError(f"unknown '{name}'; allowed: {allowed}, or a plug-in package.module:Class")


__all__ = ["ARCHITECTURES", "ArchConfig", "Backbone", "Block", "ContractError", "check_mixer",
           "import_plugins",
           "PatchesAttention", "RecordsAttention", "ReportsKernelPath", "UsesContext",
           "register", "resolve"]
