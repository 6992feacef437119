"""mlsched: a scheduler for deep-learning training jobs on shared GPU clusters."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mlsched")  # pyproject.toml's, as installed
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
