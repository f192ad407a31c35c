"""The attention mass on the parents, read sparsely, equals the dense definition: each head's
mean over the scored rows (that have parents) of the probability its row puts on them."""

import torch

from bench.training.config import load_run_config, task_instance
from bench.training.lightning_module import EmergenceModule


def module_for(task: list[str]) -> EmergenceModule:
    cfg = load_run_config([*task, "arch.d_model=16", "arch.n_heads=2", "arch.head_dim=8"])
    return EmergenceModule(cfg.arch, cfg.train, task_instance(cfg.task, cfg))


def dense(probs, scored, pattern):
    rows = probs.index_select(-2, scored)  # (B, H, P, L)
    if pattern.dim() == 2:
        return (rows * pattern).sum(-1).mean(dim=(0, 2))
    mass = (rows * pattern[:, None]).sum(-1)  # (B, H, P)
    has = (pattern.sum(-1) > 0)[:, None].expand(mass.shape).float()
    return (mass * has).sum((0, 2)) / has.sum((0, 2))


def random_probs(B, H, L):
    logits = torch.randn(B, H, L, L).masked_fill(torch.ones(L, L).triu(1).bool(), -torch.inf)
    return logits.softmax(-1)


def test_the_sparse_mass_is_the_dense_one_for_a_fixed_pattern():
    torch.manual_seed(0)
    module = module_for(["task.state_size=6", "task.sparsity=2", "task.n_states=3"])
    probs = random_probs(5, 2, module.pattern.shape[-1])
    assert torch.allclose(module.head_mass(probs), dense(probs, module.scored, module.pattern))


def test_the_sparse_mass_is_the_dense_one_for_a_per_sequence_pattern():
    torch.manual_seed(0)
    module = module_for(["task.name=induction"])
    L = module.pattern.shape[-1]
    probs = random_probs(4, 2, L)
    pattern = (torch.rand(4, len(module.scored), L) < 0.05).float()
    pattern[1, :3] = 0  # rows without parents do not count
    assert torch.allclose(module.head_mass(probs, pattern),
                          dense(probs, module.scored, pattern))


def test_an_evaluation_records_the_attention_of_a_few_long_sequences_and_scores_every_one():
    from bench.training.lightning_module import attention_rows

    assert attention_rows(23) >= 192 and attention_rows(63) >= 192  # a whole short screen
    assert attention_rows(255) == 16 and attention_rows(1023) == 2
    module = module_for(["task.state_size=32", "task.sparsity=2", "task.n_states=16"]).eval()
    L = module.pattern.shape[-1]
    rows = attention_rows(L)
    assert L == 511 and rows == 4
    batch = module.task.eval_batch(torch.device("cpu"), chunk=0)
    batch = type(batch)(*(x[:rows + 3] for x in batch))
    with torch.inference_mode():
        whole = module.scored_logits(batch)
        split = module.eval_logits(batch, record=True)
    assert torch.allclose(whole[0], split[0], atol=1e-5) and torch.equal(whole[1], split[1])
    assert all(m.last_attention.shape == (rows, 2, L, L) for m in module.attention)
    assert not any(m.record_attention for m in module.attention)
