"""MLF-RL, MLFS' deep-RL scheduler (§3.4): features, network, the decision cycle, the policy.

:mod:`.features` builds the state, :mod:`.network` the pointer-style policy network and its
model file, :mod:`.cycle` one scheduling cycle with the choices left to a chooser (MLF-H's, the
network's, or a sampler during training), :mod:`.policy` the registered ``mlf-rl`` / ``mlfs``
policy. Training: ``simulator/rltrain.py`` (``mlsched mlfs-train``). See ``docs/mlfs.md``.
"""
