import pytest
import yaml

TINY = {
    "name": "tiny",
    "task": {"name": "linear_map", "state_size": 8, "sparsity": 1, "n_states": 2},
    "archs": [{"name": "transformer", "d_model": 32, "n_layers": 1},
              {"name": "mlp_mixer", "d_model": 32, "n_layers": 1}],
    "seeds": 2,
    "train": {"max_steps": 300, "eval_every": 20, "eval_size": 128, "batch_size": 32,
              "lr": 0.01, "warmup_steps": 20},
}


@pytest.fixture
def spec_file(tmp_path):
    """Write a tiny sweep spec (TINY with top-level keys replaced) and return its path."""

    def write(name: str = "tiny", **changes):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**TINY, **changes}, sort_keys=False))
        return path

    return write
