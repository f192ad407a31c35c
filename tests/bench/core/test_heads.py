"""What is read from a head screen's ratios over checkpoints: sinks counted whatever else a head
is, and a fraction's half step and shape."""

from bench.core.heads import half_and_shape, sink_course


def test_sinks_counted_whatever_else_a_head_is():
    def head(induction=1.0, first=1.0):  # ratios in the order of CLASSES
        return [induction, 1.0, 1.0, first, 1.0, 1.0]

    # 3 layers of 2 heads; layer 2 head 0 is an induction head that also parks on the first
    # token from step 400 (the single-class rule calls it induction); layer 0 head 1 nears the
    # threshold but never reaches it
    steps = [{"step": s, "ratios": [[head(), head(first=29.9)], [head(), head()],
                                    [head(induction=200, first=f), head(first=g)]]}
             for s, f, g in ((0, 1, 1), (200, 5, 1), (400, 40, 1), (800, 65, 31))]
    c = sink_course(steps)
    assert c["fraction"] == [0, 0, 1 / 6, 2 / 6]
    assert (c["half_step"], c["shape"], c["in_layers_0_1_at"]) == (400, "jump", [])
    early = [{**s, "ratios": [[head(first=30), head()], *s["ratios"][1:]]} for s in steps]
    assert sink_course(early)["in_layers_0_1_at"] == [0, 200, 400, 800]
    assert half_and_shape([0, 1, 2, 3], [0, 0.1, 0.2, 0.3]) == (2, "gradual")
    assert half_and_shape([0, 1], [0.2, 0]) == (None, "none")
