"""Adapters for training frameworks (docs/frameworks.md): ``lightning`` (PyTorch Lightning) and
``hf`` (the Hugging Face Trainer). Each imports its framework, so import the one you use."""
