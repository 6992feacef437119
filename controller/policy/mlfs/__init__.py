"""MLFS (Wang, Liu and Shen, CoNEXT 2020): ML-feature-based scheduling of data- and
model-parallel jobs.

The pure core of MLF-H lives here: task priorities (§3.3.1, :mod:`.priority`), the Euclidean
host choice and migration-task choice (§3.3.2-3.3.3, :mod:`.euclid`) and the paper's
parameters (§4.1, :mod:`.config`). See ``docs/mlfs.md``.
"""
