"""Measurements of a run, a layer above training: the mixing-pattern maps (measured during
training by a Callback the run attaches), attention patching, the circuit screen and the
replay that refines the emergence step (run on the finished run's checkpoints). `run.train`
is a run with its measurements: training, then what its config asks for."""
