import pytest
import torch


def _jitter(module: torch.nn.Module) -> torch.nn.Module:
    """Perturb every weight: the contract must hold for any weights, not only at initialisation
    (RWKV-7, for one, starts with a zero output projection)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


@pytest.fixture
def jitter():
    return _jitter
